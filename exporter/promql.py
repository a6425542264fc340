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
    # Forecasts compare growth with the highest unreclaimable figure over this window
    # (the recent peak): a kill comes with a peak, and a noisy sample must not hold back
    # a `for:`.
    peak_window_s: int = 10 * MINUTE

    # --- the forecast (recorded series; README "The forecast (recorded series)") --------
    # Every window is taken over bytes (unreclaimable memory, its hourly minima and
    # maxima), never over a ratio or a headroom: the limit enters only at the instant, so
    # a resized limit (VPA in place) changes every forecast at the next evaluation and no
    # window mixes two limits.
    # Short horizon: the slowest deriv over short_window_s seen over short_sustain_s
    # (a fast ramp that lasted; a burst that stopped drops out within minutes).
    short_window_s: int = 5 * MINUTE
    short_sustain_s: int = 6 * MINUTE
    # ...and only while the climb goes on: the figure now above every one from
    # climbing_lag_s to climbing_lag_s + short_window_s ago. A batch that stopped drops
    # out within this lag, not a whole slope window (a nightly batch that adds a third
    # of the limit in minutes and holds it must not page; a 15-minute ramp must).
    climbing_lag_s: int = 2 * MINUTE
    # Medium horizon: the same over hours.
    medium_window_s: int = 30 * MINUTE
    medium_sustain_s: int = 30 * MINUTE
    # Lasting horizon: from hourly minima and maxima (recorded by a group evaluated every
    # lasting_interval_s), the rise per envelope window of the floor and of the envelope
    # of the peaks. Never a day of raw samples per evaluation.
    hourly_window_s: int = HOUR
    lasting_interval_s: int = 5 * MINUTE
    baseline_window_s: int = DAY  # the envelope window: peaks and floor over a day
    # The lasting growth counts only above both (per envelope window).
    min_baseline_rise_bytes: int = 64 * MiB
    min_baseline_rise_ratio: float = 0.002  # of the limit
    # The daily pattern: the same hours one period ago, lifted by a period of lasting
    # growth, forecast the peaks of the hours ahead (a daily swing's crest, a nightly
    # batch). Looked ahead 1, 2, 3 and 6 hourly windows.
    pattern_period_s: int = DAY
    # How long a figure recorded every lasting_interval_s is held by its readers.
    lasting_hold_s: int = 15 * MINUTE
    # Trend slope for panels and HeadroomNodeMemoryPressure.
    slope_window_s: int = HOUR

    # --- which cgroup binds ------------------------------------------------------------
    # A container binds (its own limit comes first) when its headroom is no more than the
    # pod cgroup's plus this tolerance; otherwise the pod-level cgroup binds.
    owner_tolerance_bytes: int = 256 * MiB
    owner_tolerance_ratio: float = 0.02  # of the limit

    # --- HeadroomMemoryFillingUp ------------------------------------------------------
    # Ticket (warning): the lasting horizon forecasts the limit within the horizon; it
    # clears only beyond the clear horizon (hysteresis).
    fill_warning_horizon_s: int = 3 * DAY
    fill_warning_clear_horizon_s: int = 4 * DAY
    fill_warning_for_s: int = 30 * MINUTE
    # Page (critical): the short or medium horizon forecasts the limit within the
    # critical horizon, confirmed by the envelope of the peaks (the climb goes beyond what
    # the recurring peaks and their lasting trend explain, or the lasting trend says the
    # peaks reach the limit within the envelope window); or the peaks' envelope reaches
    # the limit within the lasting page horizon at the lasting rate (a slow leak, a
    # sawtooth whose teeth climb), or within the confirm horizon while a climb that
    # reaches it within the fast confirm horizon goes on.
    # 75 minutes, not 60: the sustained slope reads 10-20 % below the true rate of a
    # noisy ramp (it is the slowest slope over the sustain window), and the page must
    # still be out 45 minutes before the kill.
    fill_critical_horizon_s: int = 75 * MINUTE
    fill_critical_clear_horizon_s: int = 3 * HOUR
    fill_lasting_page_horizon_s: int = 3 * HOUR
    # The lasting horizon itself (the daily pattern's windows ahead are whole hours and
    # a day old: a crossing it puts within 2 h may come within the hour).
    fill_pattern_page_horizon_s: int = 2 * HOUR
    fill_lasting_confirm_horizon_s: int = 6 * HOUR
    fill_fast_confirm_horizon_s: int = 2 * HOUR
    # A climb counts as beyond the recurring peaks once it is above their envelope by
    # more than this much of the lasting trend (a tooth of a sawtooth with a period up
    # to this long climbs less, and is released).
    fill_beyond_trend_s: int = 6 * HOUR
    # ...and by more than this much of the limit (the peaks' own noise: a plateau that
    # comes back to yesterday's level is not beyond it).
    fill_beyond_peaks_ratio: float = 0.01
    fill_critical_for_s: int = 5 * MINUTE
    # A page stays on while the pod keeps being OOM-killed and grows again within this
    # window of a kill (a crash loop under the same pod name: one stream of pages).
    crash_loop_window_s: int = 6 * HOUR

    # --- HeadroomMemoryNearLimit and panel thresholds -----------------------------------
    near_limit_ratio: float = 0.95  # red on panels
    near_limit_clear_ratio: float = 0.92  # a firing page clears only below this
    near_limit_for_s: int = 10 * MINUTE
    # ...and only when what is left is within the memory's own recent swing (the
    # highest minus the lowest figure of the last hour) or under this much of the limit:
    # a pod that sits flat at 96 % of a big limit is not an OOM kill in the making.
    near_limit_min_headroom_ratio: float = 0.01
    # Orange on panels; HeadroomMemoryReclaimAtLimit needs this much unreclaimable.
    high_ratio: float = 0.85
    high_clear_ratio: float = 0.80

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
        for fire, clear in _HYSTERESIS:
            if getattr(self, clear) < getattr(self, fire):
                raise ValueError(f"{clear} must not be below {fire} (hysteresis)")
        if self.near_limit_clear_ratio > self.near_limit_ratio or \
                self.high_clear_ratio > self.high_ratio:
            raise ValueError("a clear ratio must not exceed its fire ratio")
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
_HYSTERESIS: tuple[tuple[str, str], ...] = (
    ("fill_warning_horizon_s", "fill_warning_clear_horizon_s"),
    ("fill_critical_horizon_s", "fill_critical_clear_horizon_s"),
)
_RATIO_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Config) if f.name.endswith("_ratio")
)

CONFIG = Config().validated()
"""What ships."""


# --- recording-rule names ------------------------------------------------------------------
# Per workload (namespace, pod, container; the pod-level cgroup has container=""), unless
# said otherwise. Values in base units: bytes, bytes per second, seconds, ratios.
# The forecast contract (README "The forecast (recorded series)"): LIMIT, UNRECLAIMABLE,
# HEADROOM, BINDING, GROWTH, PEAK_ENVELOPE, TIME_TO_LIMIT, TOP_GROWER. Alerts read those
# (and TIME_TO_LIMIT_BY_HORIZON, the per-horizon figures TIME_TO_LIMIT is the soonest of).
LIMIT = "headroom:memory_limit:bytes"
UNRECLAIMABLE = "headroom:memory_unreclaimable:bytes"
WORKING_SET = "headroom:memory_working_set:bytes"
UNRECLAIMABLE_RATIO = "headroom:memory_unreclaimable:ratio"
HEADROOM = "headroom:memory_headroom:bytes"
BINDING = "headroom:memory_binding:bool"
SLOPE_SHORT = "headroom:memory_unreclaimable:slope_short"
SLOPE_MEDIUM = "headroom:memory_unreclaimable:slope_medium"
GROWTH = "headroom:memory_growth:rate"  # label horizon: short, medium, lasting
TIME_TO_LIMIT_BY_HORIZON = "headroom:memory_time_to_limit_by_horizon:seconds"
CLIMB_BEYOND_PATTERN = "headroom:memory_climb_beyond_pattern:bool"
TIME_TO_LIMIT = "headroom:memory_time_to_limit:seconds"  # label horizon: the one that binds
PROCESS_MEMORY = "headroom:process_memory:bytes"  # per workload and process
PROCESS_ATTRIBUTED = "headroom:process_memory_attributed:bytes"
MEMORY_KIND = "headroom:memory_kind:bytes"  # per workload and kind
HIDDEN = "headroom:memory_hidden:bytes"
TMPFS_USED = "headroom:tmpfs_used:bytes"  # per workload and mount
TMPFS_SIZE = "headroom:tmpfs_size:bytes"  # per workload and mount
KV_OFFLOAD_PENDING = "headroom:vllm_kv_offload_pending:bytes"
NODE_AVAILABLE = "headroom:node_memory_available:bytes"  # per node
VLLM_UP = "headroom:vllm_up:ratio"
# The lasting group (evaluated every Config.lasting_interval_s).
HOURLY_MAX = "headroom:memory_unreclaimable:hourly_max"
HOURLY_MIN = "headroom:memory_unreclaimable:hourly_min"
WORKING_SET_HOURLY_MIN = "headroom:memory_working_set:hourly_min"
HIDDEN_HOURLY_MIN = "headroom:memory_hidden:hourly_min"
UNRECLAIMABLE_BASELINE = "headroom:memory_unreclaimable:baseline"
UNRECLAIMABLE_BASELINE_RISE = "headroom:memory_unreclaimable:baseline_rise"
PEAK_ENVELOPE = "headroom:memory_peak_envelope:bytes"
PEAK_ENVELOPE_RISE = "headroom:memory_peak_envelope:rise"
HOURLY_RANGE = "headroom:memory_unreclaimable:hourly_range"
PATTERN_PEAK = "headroom:memory_pattern_peak:bytes"  # label within: the hours ahead
WORKING_SET_BASELINE = "headroom:memory_working_set:baseline"
HIDDEN_BASELINE_RISE = "headroom:memory_hidden:baseline_rise"
KIND_GROWTH = "headroom:memory_kind_growth:rate"  # per workload and kind
PROCESS_GROWTH = "headroom:process_memory_growth:rate"  # per workload and process
KIND_LASTING_GROWTH = "headroom:memory_kind_lasting_growth:rate"  # per workload and kind
PROCESS_LASTING_GROWTH = "headroom:process_memory_lasting_growth:rate"
TOP_GROWER = "headroom:memory_top_grower:rate"  # labels kind, process
VLLM_ANSWERED = "headroom:vllm_answered:bool"
# Compatibility: the alert owner of earlier releases is the binding cgroup.
OWNER = BINDING

HORIZONS: tuple[str, ...] = ("short", "medium", "lasting")
# The growth kinds beyond the cgroup's own: the pod's /dev/shm, and what no process holds.
KIND_DEV_SHM, KIND_HIDDEN = "dev_shm", "hidden"
KINDS: tuple[str, ...] = ("anon", "shmem", KIND_DEV_SHM, "kernel", KIND_HIDDEN)

# Name -> meaning, in evaluation order (later rules read earlier ones), per group.
FAST_RECORDING_RULE_HELP: dict[str, str] = {
    LIMIT: "effective hard limit in force now (absent when 0: a limit of 0 never divides)",
    UNRECLAIMABLE: "memory the kernel cannot reclaim without swap (anon, shmem, kernel): "
    "the figure that OOMs",
    WORKING_SET: "usage - inactive_file: the kubelet's working set, for comparison",
    UNRECLAIMABLE_RATIO: "unreclaimable / the limit in force now",
    HEADROOM: "limit now - unreclaimable: what can still be charged once page cache is gone",
    BINDING: "1 on the cgroup whose limit binds: a container whose headroom is no more "
    "than the pod cgroup's plus a tolerance (its own limit comes first), the pod-level "
    "cgroup when one of its containers has no such limit; 0 on the others",
    SLOPE_SHORT: "deriv of unreclaimable over the short window (bytes/s)",
    SLOPE_MEDIUM: "deriv of unreclaimable over the medium window (bytes/s)",
    GROWTH: "growth estimate per horizon (bytes/s, present only while > 0): short and "
    "medium = the slowest slope over their sustain window once the series spans it "
    "(short: only while the figure still makes new highs); "
    "lasting = the rise per day of both the floor and the envelope of the peaks (the "
    "smaller), from hourly minima and maxima",
    TIME_TO_LIMIT_BY_HORIZON: "seconds until the limit in force now, per horizon: short "
    "and medium from the recent peak; lasting the sooner of the peaks' envelope at the "
    "lasting rate and the daily pattern (the first hours-ahead window whose pattern peak "
    "reaches the limit: 1, 2, 3 or 6 h)",
    CLIMB_BEYOND_PATTERN: "1 where the climb now goes beyond what the recurring peaks "
    "explain: above their envelope by a margin and a day of their lasting trend (or by "
    "fill_beyond_trend_s of it while the lasting horizon reaches the limit within a "
    "day), or no envelope yet (a young series); absent otherwise",
    TIME_TO_LIMIT: "the soonest forecast that counts, one series per cgroup: short and "
    "medium only where the climb goes beyond the pattern, lasting always; label horizon "
    "says which binds. The page reads this",
    PROCESS_MEMORY: "anon + mapped shmem per process name (PSS where present, else RSS)",
    PROCESS_ATTRIBUTED: "anon + mapped shmem the container's processes account for",
    MEMORY_KIND: "unreclaimable memory per kind: anon, shmem (not in a tmpfs), dev_shm "
    "(memory-backed tmpfs files), kernel (kernel + socket buffers)",
    HIDDEN: "unreclaimable memory no process accounts for (unmapped /dev/shm files, "
    "kernel memory, charges left by dead containers)",
    TMPFS_USED: "bytes used in each memory-backed tmpfs of the pod (per mount)",
    TMPFS_SIZE: "size of each memory-backed tmpfs of the pod (per mount)",
    KV_OFFLOAD_PENDING: "part of vLLM's CPU KV-offload tier not yet in use: "
    "capacity * (1 - usage), or the whole capacity when vLLM reports no usage",
    NODE_AVAILABLE: "MemAvailable of the node (per node_labels)",
    VLLM_UP: "fraction of scrapes over the vLLM scrape window that read the pod's vLLM "
    "/metrics",
}
LASTING_RECORDING_RULE_HELP: dict[str, str] = {
    HOURLY_MAX: "highest unreclaimable figure over the last hour",
    HOURLY_MIN: "lowest unreclaimable figure over the last hour",
    WORKING_SET_HOURLY_MIN: "lowest working set over the last hour",
    HIDDEN_HOURLY_MIN: "lowest hidden memory over the last hour",
    UNRECLAIMABLE_BASELINE: "the floor: lowest unreclaimable figure over the envelope "
    "window (from the hourly minima)",
    UNRECLAIMABLE_BASELINE_RISE: "the floor now minus the floor one window earlier "
    "(bytes per window), for a workload that spans both windows",
    PEAK_ENVELOPE: "the level the recurring peaks reach: the highest hourly maximum over "
    "the envelope window before the last hour",
    PEAK_ENVELOPE_RISE: "the envelope now minus the envelope one window earlier",
    HOURLY_RANGE: "the last hour's highest minus lowest unreclaimable figure: the "
    "memory's own recent swing",
    WORKING_SET_BASELINE: "lowest working set over the envelope window: flat while "
    "unreclaimable memory squeezes page cache out",
    HIDDEN_BASELINE_RISE: "growth of the hidden memory's floor over one window",
    PATTERN_PEAK: "the peak the daily pattern forecasts within the hours ahead (label "
    "within): the highest figure of those hours one period ago plus a period of lasting "
    "growth (absent without lasting growth)",
    KIND_GROWTH: "deriv of each kind over the last hour (bytes/s)",
    PROCESS_GROWTH: "deriv of each process's memory over the last hour (bytes/s)",
    KIND_LASTING_GROWTH: "each kind's day-over-day rise (the last hour's mean minus the "
    "same hour's one period ago, per second): a daily swing, read at the same phase, "
    "does not rise",
    PROCESS_LASTING_GROWTH: "each process's day-over-day rise, as KIND_LASTING_GROWTH",
    TOP_GROWER: "per binding cgroup: the kind whose growth explains most of its growth "
    "and, when that kind is a process's (anon, shmem), the process that grows most; "
    "value = that process's (or the kind's) growth (bytes/s) at the horizon that binds: "
    "day over day where the lasting horizon binds (a slow leak under a daily swing is "
    "named, not the swing), over the last hour otherwise",
    VLLM_ANSWERED: "1 where the pod's vLLM answered at least once in the last hour: a "
    "vLLM without a listener (vllm run-batch) never does, and gets no meta alert",
}
RECORDING_RULE_HELP: dict[str, str] = {**FAST_RECORDING_RULE_HELP,
                                       **LASTING_RECORDING_RULE_HELP}
RECORDING_RULES: tuple[str, ...] = tuple(RECORDING_RULE_HELP)
FORECAST_SERIES: tuple[str, ...] = (LIMIT, UNRECLAIMABLE, HEADROOM, BINDING, GROWTH,
                                    PEAK_ENVELOPE, TIME_TO_LIMIT, TOP_GROWER)

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
    "FORECAST_SERIES",
    "HORIZONS",
    "HOUR",
    "KINDS",
    "MINUTE",
    "OWNER",
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
