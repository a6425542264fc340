"""The PromQL half of the catalogue: the rules' config, recording-rule names, selectors.

``exporter.catalog`` names what the exporter exports; this package names what the rules
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

One module per job: ``config`` (the knobs), ``names`` (the recording-rule and alert
names), ``syntax`` (writing PromQL); import them from here.
"""

from __future__ import annotations

from exporter.promql.names import (
    ALERT_NAMES,
    BINDING,
    CLIMB_BEYOND_PATTERN,
    ENVELOPE_TIME_TO_LIMIT,
    FAST_RECORDING_RULE_HELP,
    FORECAST_SERIES,
    GREW,
    GROWTH,
    HEADROOM,
    HIDDEN,
    HIDDEN_BASELINE,
    HIDDEN_BASELINE_RISE,
    HIDDEN_HOURLY_MIN,
    HORIZONS,
    HOURLY_MAX,
    HOURLY_MIN,
    HOURLY_NOISE,
    HOURLY_RANGE,
    KIND_DEV_SHM,
    KIND_GROWTH,
    KIND_HIDDEN,
    KIND_LASTING_GROWTH,
    KINDS,
    KV_OFFLOAD_PENDING,
    LASTING_RECORDING_RULE_HELP,
    LIMIT,
    MEMORY_KIND,
    NODE_AVAILABLE,
    OWNER,
    PATTERN_CEILING,
    PATTERN_KNOWN,
    PATTERN_PEAK,
    PATTERN_SIGN,
    PEAK_ENVELOPE,
    PEAK_ENVELOPE_RISE,
    PEAK_HEADROOM_SWINGS,
    PROCESS_ATTRIBUTED,
    PROCESS_GROWTH,
    PROCESS_LASTING_GROWTH,
    PROCESS_MEMORY,
    QUIET_SWING,
    RECORDING_RULE_HELP,
    RECORDING_RULES,
    RELEASED,
    SLOPE_MEDIUM,
    SLOPE_SHORT,
    TIME_TO_LIMIT,
    TIME_TO_LIMIT_BY_HORIZON,
    TMPFS_SIZE,
    TMPFS_USED,
    TOP_GROWER,
    UNRECLAIMABLE,
    UNRECLAIMABLE_BASELINE,
    UNRECLAIMABLE_BASELINE_RISE,
    UNRECLAIMABLE_RATIO,
    VLLM_ANSWERED,
    VLLM_UP,
    WORKING_SET,
    WORKING_SET_BASELINE,
    WORKING_SET_HOURLY_MIN,
)
from exporter.promql.rules_config import CONFIG, DAY, DURATION_FIELDS, HOUR, MINUTE, Config, MiB
from exporter.promql.syntax import (
    by,
    duration,
    expr,
    number,
    one_of,
    selector,
    series,
)

__all__ = [
    "ALERT_NAMES",
    "BINDING",
    "CLIMB_BEYOND_PATTERN",
    "CONFIG",
    "DAY",
    "DURATION_FIELDS",
    "ENVELOPE_TIME_TO_LIMIT",
    "FAST_RECORDING_RULE_HELP",
    "FORECAST_SERIES",
    "GREW",
    "GROWTH",
    "HEADROOM",
    "HIDDEN",
    "HIDDEN_BASELINE",
    "HIDDEN_BASELINE_RISE",
    "HIDDEN_HOURLY_MIN",
    "HORIZONS",
    "HOUR",
    "HOURLY_MAX",
    "HOURLY_MIN",
    "HOURLY_NOISE",
    "HOURLY_RANGE",
    "KINDS",
    "KIND_DEV_SHM",
    "KIND_GROWTH",
    "KIND_HIDDEN",
    "KIND_LASTING_GROWTH",
    "KV_OFFLOAD_PENDING",
    "LASTING_RECORDING_RULE_HELP",
    "LIMIT",
    "MEMORY_KIND",
    "MINUTE",
    "NODE_AVAILABLE",
    "OWNER",
    "PATTERN_CEILING",
    "PATTERN_KNOWN",
    "PATTERN_PEAK",
    "PATTERN_SIGN",
    "PEAK_ENVELOPE",
    "PEAK_ENVELOPE_RISE",
    "PEAK_HEADROOM_SWINGS",
    "PROCESS_ATTRIBUTED",
    "PROCESS_GROWTH",
    "PROCESS_LASTING_GROWTH",
    "PROCESS_MEMORY",
    "QUIET_SWING",
    "RECORDING_RULES",
    "RECORDING_RULE_HELP",
    "RELEASED",
    "SLOPE_MEDIUM",
    "SLOPE_SHORT",
    "TIME_TO_LIMIT",
    "TIME_TO_LIMIT_BY_HORIZON",
    "TMPFS_SIZE",
    "TMPFS_USED",
    "TOP_GROWER",
    "UNRECLAIMABLE",
    "UNRECLAIMABLE_BASELINE",
    "UNRECLAIMABLE_BASELINE_RISE",
    "UNRECLAIMABLE_RATIO",
    "VLLM_ANSWERED",
    "VLLM_UP",
    "WORKING_SET",
    "WORKING_SET_BASELINE",
    "WORKING_SET_HOURLY_MIN",
    "Config",
    "MiB",
    "by",
    "duration",
    "expr",
    "number",
    "one_of",
    "selector",
    "series",
]
