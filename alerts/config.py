"""One frozen object with every knob of the rules, in the style of kubernetes-mixin's
``_config``. Durations are whole seconds; ``promql_duration`` renders them.

``DEFAULT`` is what ships. ``Config.replace(...)`` and ``Config.scaled(factor)`` give
variants, e.g. a live end-to-end run with a 1 s scrape wants every window and horizon
shrunk by the same factor so the relations between them still hold.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from exporter.catalog import WORKLOAD_LABELS

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR
MiB = 1024 * 1024

# Fields holding durations (seconds): scaled() shrinks exactly these.
_DURATION_FIELDS = (
    "deriv_window_s",
    "baseline_window_s",
    "fill_warning_horizon_s",
    "fill_critical_horizon_s",
    "fill_warning_for_s",
    "fill_critical_for_s",
    "near_limit_for_s",
    "reclaim_window_s",
    "reclaim_for_s",
    "hidden_for_s",
    "shm_fill_window_s",
    "shm_fill_horizon_s",
    "shm_fill_for_s",
    "kv_offload_for_s",
    "oom_window_s",
    "exporter_down_for_s",
    "collector_window_s",
    "collector_for_s",
    "vllm_scrape_window_s",
    "vllm_scrape_for_s",
)


@dataclass(frozen=True)
class Config:
    # --- selection and identity ---------------------------------------------------------
    # Label matchers (without braces) that select headroom's series.
    selector: str = 'job="headroom"'
    # Labels every recording rule keeps: one series per workload, whatever exporter
    # instance scraped it (a DaemonSet pod restart changes `instance`). Add "cluster" here
    # when one Prometheus sees several clusters.
    group_labels: tuple[str, ...] = WORKLOAD_LABELS
    runbook_url_base: str = (
        "https://github.com/vllm-headroom/headroom/blob/main/alerts/runbooks"
    )
    rule_group_prefix: str = "headroom"

    # --- trends -------------------------------------------------------------------------
    # Short trend: deriv() over this window, "how fast does it grow now".
    deriv_window_s: int = HOUR
    # Baseline: the lowest unreclaimable figure in this window; it rising from one window
    # to the next is growth that diurnal load cannot explain.
    baseline_window_s: int = DAY
    # Sustained growth: the baseline must rise per window by more than both.
    min_baseline_rise_bytes: int = 64 * MiB
    min_baseline_rise_ratio: float = 0.01  # of the limit

    # --- HeadroomMemoryFillingUp ------------------------------------------------------
    fill_warning_horizon_s: int = 12 * HOUR
    fill_critical_horizon_s: int = HOUR
    fill_warning_for_s: int = 30 * MINUTE
    fill_critical_for_s: int = 5 * MINUTE
    # The page also needs the pod to be this full already: a fast ramp far from the
    # limit (weights loading, a burst of requests) is not an emergency.
    fill_critical_min_ratio: float = 0.90

    # --- HeadroomMemoryNearLimit ------------------------------------------------------
    near_limit_ratio: float = 0.95
    near_limit_for_s: int = 5 * MINUTE

    # --- HeadroomMemoryReclaimAtLimit -------------------------------------------------
    reclaim_window_s: int = 5 * MINUTE
    reclaim_for_s: int = 15 * MINUTE
    # Reclaim at the limit is routine for a pod full of page cache; it matters only when
    # little of the charge is reclaimable.
    reclaim_min_ratio: float = 0.85

    # --- HeadroomHiddenMemoryGrowth ----------------------------------------------------
    hidden_min_rise_bytes: int = 64 * MiB
    hidden_min_rise_ratio: float = 0.01  # of the limit
    hidden_for_s: int = HOUR

    # --- HeadroomSharedMemoryFillingUp (node-mixin's NodeFilesystemSpaceFillingUp) ------
    shm_fill_window_s: int = 6 * HOUR
    shm_fill_horizon_s: int = DAY
    shm_fill_max_free_ratio: float = 0.40
    shm_fill_for_s: int = HOUR

    # --- HeadroomKVOffloadWillNotFit --------------------------------------------------
    kv_offload_for_s: int = 15 * MINUTE

    # --- HeadroomPodOOMKilled ---------------------------------------------------------
    oom_window_s: int = 10 * MINUTE

    # --- meta-monitoring --------------------------------------------------------------
    exporter_down_for_s: int = 15 * MINUTE
    collector_window_s: int = 15 * MINUTE
    collector_for_s: int = 15 * MINUTE
    vllm_scrape_window_s: int = 15 * MINUTE
    vllm_scrape_for_s: int = 15 * MINUTE

    def replace(self, **changes: Any) -> Config:
        """A copy with some fields changed (dataclasses.replace, validated)."""
        return dataclasses.replace(self, **changes).validated()

    def scaled(self, factor: float, minimum_s: int = 1) -> Config:
        """Every duration divided by ``factor`` (at least ``minimum_s``): for a live test
        with a fast scrape, e.g. ``DEFAULT.scaled(720)`` turns a day into 2 minutes."""
        if factor <= 0:
            raise ValueError("factor must be positive")
        changes = {
            f: max(minimum_s, round(getattr(self, f) / factor)) for f in _DURATION_FIELDS
        }
        return self.replace(**changes)

    def validated(self) -> Config:
        for f in _DURATION_FIELDS:
            if getattr(self, f) <= 0:
                raise ValueError(f"{f} must be positive")
        if self.fill_critical_horizon_s > self.fill_warning_horizon_s:
            raise ValueError("the critical horizon must not exceed the warning horizon")
        for f in (
            "min_baseline_rise_ratio", "fill_critical_min_ratio", "near_limit_ratio",
            "reclaim_min_ratio", "hidden_min_rise_ratio", "shm_fill_max_free_ratio",
        ):
            if not 0 <= getattr(self, f) <= 1:
                raise ValueError(f"{f} must be within 0..1")
        if not {"namespace", "pod"} <= set(self.group_labels):
            raise ValueError("group_labels must keep namespace and pod")
        return self

    def runbook_url(self, alertname: str) -> str:
        return f"{self.runbook_url_base.rstrip('/')}/{alertname}.md"


def promql_duration(seconds: int) -> str:
    """1d, 12h, 1h30m, 90s -> Prometheus duration text (largest units first)."""
    if seconds <= 0:
        raise ValueError("durations must be positive")
    out = []
    for unit, size in (("d", DAY), ("h", HOUR), ("m", MINUTE), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


DEFAULT = Config().validated()
