"""The PromQL half of the catalogue: the rules' config, recording-rule names, selectors.

``exporter.catalog`` names what the exporter exports; this module names what the rules
derive from it. ``alerts/`` builds the rules from it and ``dashboards/`` draws them, so a
threshold or a recording-rule name cannot differ between an alert and the panel that
explains it. Dashboards import from here, never from ``alerts/``:

* ``CONFIG`` (a ``Config``, kubernetes-mixin's ``_config``): the ``job`` selector,
  thresholds (``CONFIG.high_ratio`` orange, ``CONFIG.near_limit_ratio`` red, the
  FillingUp horizons), windows and the runbook base URL. A panel's threshold comes from
  here, never a literal.
* the recording-rule names (``UNRECLAIMABLE``, ``HEADROOM``, ``TIME_TO_LIMIT``, ...), with
  ``RECORDING_RULE_HELP`` (name -> meaning, in evaluation order) and ``RECORDING_RULES``;
  ``ALERT_NAMES``.
* ``selector`` / ``series`` (one way to write ``name{a="b", c=~"d"}``), ``duration``
  (seconds -> ``1h30m``), ``number`` and ``expr`` (a ``string.Template`` with
  ``${name}`` placeholders, for readable multi-line PromQL).

Recording-rule names say what a series is, not the window it was computed over: windows
are configurable (``Config.scaled``), and ``..:slope`` stays true where ``..:deriv1h``
would lie.
"""

from __future__ import annotations

import dataclasses
import string
import textwrap
from dataclasses import dataclass
from typing import Any

from exporter.catalog import WORKLOAD_LABELS, MetricSpec

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR
MiB = 1024 * 1024


@dataclass(frozen=True)
class Config:
    """Every knob of the rules. Durations are whole seconds (``duration`` renders them);
    ``DURATION_FIELDS`` lists them for ``scaled``."""

    # --- selection and identity ---------------------------------------------------------
    # Label matchers (without braces) that select headroom's series.
    selector: str = 'job="headroom"'
    # Labels every recording rule keeps: one series per workload, whatever exporter
    # instance scraped it (a DaemonSet rollout changes `instance`). Add "cluster" here
    # when one Prometheus sees several clusters.
    group_labels: tuple[str, ...] = WORKLOAD_LABELS
    # Labels that identify a node's series (headroom_node_memory_*): the exporter's
    # target. Use ("node",) where the scrape config adds a node label.
    node_labels: tuple[str, ...] = ("instance",)
    runbook_url_base: str = (
        "https://github.com/vllm-headroom/headroom/blob/main/alerts/runbooks"
    )
    rule_group_prefix: str = "headroom"

    # --- gaps and restarts of the exporter ------------------------------------------------
    # Recorded figures hold their last sample this long, so a scrape gap or an exporter
    # pod being replaced does not empty them (and resolve every alert).
    hold_s: int = 10 * MINUTE
    # Alerts keep firing this long after their condition last held: a gap or a noisy
    # sample does not resolve a page and re-fire it.
    keep_firing_s: int = 15 * MINUTE
    # Forecasts compare growth with the lowest headroom over this window (the recent
    # peak): a kill comes with a peak, and a noisy sample must not hold back a `for:`.
    peak_window_s: int = 10 * MINUTE

    # --- trends -------------------------------------------------------------------------
    # Trend slope: deriv() over this window ("how fast does it grow this hour").
    slope_window_s: int = HOUR
    # A slope counts only when its series spans at least this fraction of the window
    # (a new series' first two samples are not a trend).
    min_span_ratio: float = 0.5
    # Sustained slopes: the slowest slope over a window, taken over a sustain window.
    # Only growth that lasted window + sustain counts: a batch that rises for a few
    # minutes and stops drops out within minutes. Short: fast ramps (a 20-minute climb);
    # medium: ramps over hours, where the short slope drowns in noise.
    short_window_s: int = 2 * MINUTE
    short_sustain_s: int = 5 * MINUTE
    medium_window_s: int = 15 * MINUTE
    medium_sustain_s: int = 20 * MINUTE
    # Baseline: the lowest unreclaimable figure in this window; it rising from one window
    # to the next is growth that diurnal load cannot explain.
    baseline_window_s: int = DAY
    # Sustained growth: the baseline must rise per window by more than both.
    min_baseline_rise_bytes: int = 64 * MiB
    min_baseline_rise_ratio: float = 0.01  # of the limit
    # A restart: unreclaimable falls below this fraction of its floor before the fall.
    # Baselines that compare one window with the previous skip a restart.
    restart_drop_ratio: float = 0.5

    # --- which cgroup owns a pod's alert -------------------------------------------------
    # A container owns its pod's memory alerts (the pod-level cgroup's twin stays silent)
    # when its headroom is no more than the pod cgroup's plus this tolerance: its own
    # limit binds first. Otherwise the pod-level cgroup's limit binds and it owns them.
    owner_tolerance_bytes: int = 256 * MiB
    owner_tolerance_ratio: float = 0.02  # of the limit

    # --- HeadroomMemoryFillingUp ------------------------------------------------------
    # Warning: the baseline's rise per window, extrapolated over the horizon. A trend
    # seen in each of the last two windows (a multi-day leak) gets the long horizon.
    fill_warning_horizon_s: int = 12 * HOUR
    fill_warning_long_horizon_s: int = 2 * DAY
    fill_warning_for_s: int = 30 * MINUTE
    # Critical: within this horizon, by the trend (slow leaks) or the sustained slope
    # (fast ramps, which must also be this full already).
    fill_critical_horizon_s: int = HOUR
    fill_critical_for_s: int = 5 * MINUTE
    fill_fast_min_ratio: float = 0.75

    # --- HeadroomMemoryNearLimit and panel thresholds -----------------------------------
    near_limit_ratio: float = 0.95  # red on panels
    near_limit_for_s: int = 10 * MINUTE
    # Orange on panels; HeadroomMemoryReclaimAtLimit needs this much unreclaimable.
    high_ratio: float = 0.85

    # --- HeadroomMemoryReclaimAtLimit -------------------------------------------------
    reclaim_window_s: int = 15 * MINUTE
    reclaim_for_s: int = 15 * MINUTE

    # --- HeadroomHiddenMemoryGrowth ----------------------------------------------------
    hidden_min_rise_bytes: int = 64 * MiB
    hidden_min_rise_ratio: float = 0.01  # of the limit
    hidden_for_s: int = HOUR

    # --- HeadroomSharedMemoryFillingUp (node-mixin's NodeFilesystemSpaceFillingUp) ------
    shm_fill_window_s: int = 6 * HOUR
    shm_fill_horizon_s: int = DAY
    shm_fill_max_free_ratio: float = 0.40
    shm_fill_for_s: int = HOUR

    # --- HeadroomStaleSharedMemory ----------------------------------------------------
    stale_shm_min_bytes: int = 64 * MiB
    stale_shm_for_s: int = 30 * MINUTE

    # --- HeadroomKVOffloadWillNotFit --------------------------------------------------
    kv_offload_for_s: int = 15 * MINUTE

    # --- HeadroomNodeMemoryPressure ---------------------------------------------------
    # MemAvailable below this fraction of MemTotal and falling toward the kubelet's
    # eviction threshold (default hard threshold memory.available<100Mi) within the
    # horizon, by its trend.
    node_pressure_ratio: float = 0.10
    node_eviction_bytes: int = 100 * MiB
    node_pressure_horizon_s: int = HOUR
    node_pressure_for_s: int = 10 * MINUTE
    # A pod whose limit is at least this fraction of the node's memory has no limit of
    # its own (the exporter reports the node's memory as its effective limit).
    no_limit_ratio: float = 0.90

    # --- HeadroomPodOOMKilled ---------------------------------------------------------
    # A kill: a counter above the highest value it had over the lookback, one window ago.
    oom_window_s: int = 10 * MINUTE
    oom_lookback_s: int = HOUR

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
        with a fast scrape, e.g. ``CONFIG.scaled(720)`` turns a day into 2 minutes."""
        if factor <= 0:
            raise ValueError("factor must be positive")
        changes = {
            f: max(minimum_s, round(getattr(self, f) / factor)) for f in DURATION_FIELDS
        }
        return self.replace(**changes)

    def validated(self) -> Config:
        for f in DURATION_FIELDS:
            if getattr(self, f) <= 0:
                raise ValueError(f"{f} must be positive")
        if self.fill_critical_horizon_s > self.fill_warning_horizon_s:
            raise ValueError("the critical horizon must not exceed the warning horizon")
        if self.fill_warning_horizon_s > self.fill_warning_long_horizon_s:
            raise ValueError("the long warning horizon must not be the shorter one")
        for f in _RATIO_FIELDS:
            if not 0 <= getattr(self, f) <= 1:
                raise ValueError(f"{f} must be within 0..1")
        if not {"namespace", "pod", "container"} <= set(self.group_labels):
            raise ValueError("group_labels must keep namespace, pod and container")
        if not self.node_labels:
            raise ValueError("node_labels must name at least one label")
        return self

    @property
    def pod_labels(self) -> tuple[str, ...]:
        """The group labels without container: what identifies a pod."""
        return tuple(x for x in self.group_labels if x != "container")

    def runbook_url(self, alertname: str) -> str:
        return f"{self.runbook_url_base.rstrip('/')}/{alertname}.md"


DURATION_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Config) if f.name.endswith("_s")
)
_RATIO_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Config) if f.name.endswith("_ratio")
)

CONFIG = Config().validated()
"""What ships."""


# --- recording-rule names ------------------------------------------------------------------
# Per workload (namespace, pod, container; the pod-level cgroup has container=""), unless
# said otherwise. Values in base units: bytes, bytes per second, seconds, ratios.
LIMIT = "headroom:memory_limit:bytes"
UNRECLAIMABLE = "headroom:memory_unreclaimable:bytes"
WORKING_SET = "headroom:memory_working_set:bytes"
UNRECLAIMABLE_RATIO = "headroom:memory_unreclaimable:ratio"
HEADROOM = "headroom:memory_headroom:bytes"
HEADROOM_LOWEST = "headroom:memory_headroom_lowest:bytes"
OWNER = "headroom:memory_alert_owner:bool"
RESTART = "headroom:memory_restart:bool"
UNRECLAIMABLE_SLOPE = "headroom:memory_unreclaimable:slope"
UNRECLAIMABLE_SUSTAINED_SHORT = "headroom:memory_unreclaimable:sustained_slope_short"
UNRECLAIMABLE_SUSTAINED_MEDIUM = "headroom:memory_unreclaimable:sustained_slope_medium"
UNRECLAIMABLE_BASELINE = "headroom:memory_unreclaimable:baseline"
UNRECLAIMABLE_BASELINE_RISE = "headroom:memory_unreclaimable:baseline_rise"
UNRECLAIMABLE_GROWTH_RATE = "headroom:memory_unreclaimable:growth_rate"
TIME_TO_LIMIT = "headroom:memory_time_to_limit:seconds"
WORKING_SET_BASELINE = "headroom:memory_working_set:baseline"
PROCESS_ATTRIBUTED = "headroom:process_memory_attributed:bytes"
HIDDEN = "headroom:memory_hidden:bytes"
HIDDEN_BASELINE_RISE = "headroom:memory_hidden:baseline_rise"
TMPFS_USED = "headroom:tmpfs_used:bytes"  # per workload and mount
TMPFS_SIZE = "headroom:tmpfs_size:bytes"  # per workload and mount
KV_OFFLOAD_PENDING = "headroom:vllm_kv_offload_pending:bytes"
NODE_AVAILABLE = "headroom:node_memory_available:bytes"  # per node

# Name -> meaning, in evaluation order (later rules read earlier ones).
RECORDING_RULE_HELP: dict[str, str] = {
    LIMIT: "effective hard limit of the cgroup (absent when 0: a limit of 0 never divides)",
    UNRECLAIMABLE: "memory the kernel cannot reclaim without swap (anon, shmem, kernel)",
    WORKING_SET: "usage - inactive_file: the kubelet's working set, for comparison",
    UNRECLAIMABLE_RATIO: "unreclaimable / limit",
    HEADROOM: "limit - unreclaimable: what can still be charged once page cache is gone",
    HEADROOM_LOWEST: "the lowest headroom over the peak window (limit - the recent peak): "
    "what the forecasts compare growth with",
    OWNER: "1 for a container whose own limit binds first (its headroom is no more than "
    "the pod cgroup's plus a tolerance): the pod-level twin of its alerts stays silent",
    RESTART: "1 while unreclaimable has just fallen below a fraction of its floor: the "
    "container restarted (and the pod-level cgroup, when one of its containers did)",
    UNRECLAIMABLE_SLOPE: "trend: slope of unreclaimable over the trend window (bytes/s), "
    "once the series spans enough of it",
    UNRECLAIMABLE_SUSTAINED_SHORT: "the slowest short-window slope over the short "
    "sustain window (bytes/s): positive only while a fast ramp has lasted; a rise that "
    "stopped drops out within minutes",
    UNRECLAIMABLE_SUSTAINED_MEDIUM: "the slowest medium-window slope over the medium "
    "sustain window (bytes/s): positive while a ramp over hours goes on",
    UNRECLAIMABLE_BASELINE: "lowest unreclaimable figure in the baseline window",
    UNRECLAIMABLE_BASELINE_RISE: "baseline now minus baseline one window earlier: growth "
    "that diurnal load cannot explain (bytes per window); absent across a restart",
    UNRECLAIMABLE_GROWTH_RATE: "fastest trend slope in the last baseline window, present "
    "only while the baseline rises by more than the minimum (bytes/s)",
    TIME_TO_LIMIT: "headroom / trend slope, where the slope is positive (seconds)",
    WORKING_SET_BASELINE: "lowest working set in the baseline window: flat while "
    "unreclaimable memory squeezes page cache out",
    PROCESS_ATTRIBUTED: "anon + mapped shmem the container's processes account for "
    "(PSS where present, else RSS)",
    HIDDEN: "unreclaimable memory no process accounts for (unmapped /dev/shm files, "
    "kernel memory, charges left by dead containers)",
    HIDDEN_BASELINE_RISE: "growth of the hidden memory's baseline over one window",
    TMPFS_USED: "bytes used in each memory-backed tmpfs of the pod (per mount)",
    TMPFS_SIZE: "size of each memory-backed tmpfs of the pod (per mount)",
    KV_OFFLOAD_PENDING: "part of vLLM's CPU KV-offload tier not yet in use: "
    "capacity * (1 - usage), or the whole capacity when vLLM reports no usage",
    NODE_AVAILABLE: "MemAvailable of the node (per node_labels)",
}
RECORDING_RULES: tuple[str, ...] = tuple(RECORDING_RULE_HELP)

ALERT_NAMES: tuple[str, ...] = (
    "HeadroomMemoryFillingUp",
    "HeadroomMemoryNearLimit",
    "HeadroomMemoryReclaimAtLimit",
    "HeadroomHiddenMemoryGrowth",
    "HeadroomSharedMemoryFillingUp",
    "HeadroomStaleSharedMemory",
    "HeadroomKVOffloadWillNotFit",
    "HeadroomNodeMemoryPressure",
    "HeadroomPodOOMKilled",
    "HeadroomExporterDown",
    "HeadroomCollectorFailing",
    "HeadroomVLLMScrapeFailing",
)


# --- writing PromQL ------------------------------------------------------------------------
def selector(*matchers: str, **equal: str) -> str:
    """``{a="b", c=~"d"}`` from raw matchers (``'job=~"$job"'``) and exact ones
    (``kind="anon"``); empty raw matchers are skipped, no matcher gives ``""``."""
    parts = [m for m in matchers if m]
    parts += [f'{k}="{v}"' for k, v in equal.items()]
    return "{" + ", ".join(parts) + "}" if parts else ""


def series(metric: MetricSpec | str, *matchers: str, **equal: str) -> str:
    """A catalogue metric (or recording-rule name) with a selector."""
    name = metric.name if isinstance(metric, MetricSpec) else metric
    return name + selector(*matchers, **equal)


def by(*labels: str) -> str:
    """``(a, b)`` for ``by``/``on``/``ignoring`` clauses."""
    return "(" + ", ".join(labels) + ")"


def duration(seconds: int) -> str:
    """1d, 12h, 1h30m, 90s -> Prometheus duration text (largest units first)."""
    if seconds <= 0:
        raise ValueError("durations must be positive")
    out = []
    for unit, size in (("d", DAY), ("h", HOUR), ("m", MINUTE), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def number(x: float) -> str:
    """A number PromQL reads, without float noise: 67108864, 0.95, 43200."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def expr(template: str, **values: str | int | float) -> str:
    """A PromQL template with ``${name}`` placeholders, dedented and stripped; numbers are
    written with ``number``. A missing value raises (``string.Template.substitute``)."""
    text = textwrap.dedent(template).strip()
    return string.Template(text).substitute(
        {k: v if isinstance(v, str) else number(v) for k, v in values.items()}
    )


__all__ = [
    "ALERT_NAMES",
    "CONFIG",
    "DAY",
    "DURATION_FIELDS",
    "HOUR",
    "MINUTE",
    "RECORDING_RULES",
    "RECORDING_RULE_HELP",
    "Config",
    "by",
    "duration",
    "expr",
    "number",
    "selector",
    "series",
]
