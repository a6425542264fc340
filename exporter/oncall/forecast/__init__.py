"""The forecast every surface shows: the recorded series of the forecast contract, and the
local mirror of their rules for a surface that has no Prometheus.

The contract (docs: README "The forecast (recorded series)"; names in
``exporter/promql/``) records per cgroup (namespace, pod, container; container="" is
the pod-level cgroup): the limit, the unreclaimable figure, the headroom, which cgroup of
the pod binds, the growth at three horizons (short: minutes, medium: hours, lasting:
days), the peaks' envelope, the time to limit at the horizon that binds, and the top
grower (kind and process). ``explain``, ``top --prometheus``, the dashboards' first
screen and the post-mortem page read those and nothing else, so they give one answer.

:func:`local_forecast` is the same definition in Python, over the points a surface read
itself (``top`` without Prometheus, the post-mortem's sampler points, explain when the
rules are not loaded). It mirrors ``alerts/rules.py``; when one changes, change the other
(tests/test_one_answer.py feeds both the same series).

Pure: no I/O. The package: :mod:`.data` (the forecast as data, the binding cgroup),
:mod:`.recorded` (reading the recorded series), :mod:`.series` (the rules' windows and
PromQL functions over points), :mod:`.mirror` (the rules in Python), :mod:`.rise` (what
grew before a kill).
"""

from exporter.oncall.forecast.data import (
    CONTRACT,
    GROWER_KINDS,
    HORIZONS,
    LOCAL,
    NOISE_BAND_SWINGS,
    RECORDED,
    Forecast,
    Grower,
    Point,
    Workload,
    grower_text,
    growing,
    tightest,
    tolerance,
)
from exporter.oncall.forecast.mirror import (
    History,
    kind_growth,
    local_forecast,
    mark_binding,
    peak_headroom_swings,
    pod_forecasts,
    process_growth,
    soonest,
    time_to_limit_by_horizon,
    top_grower,
)
from exporter.oncall.forecast.recorded import by_pod, from_recorded, recorded_queries
from exporter.oncall.forecast.rise import Rise, climb_start, rose_most
from exporter.oncall.forecast.series import Windows, between, slope

# Series of the contract that the dashboards name through this package.
from exporter.promql import BINDING, TIME_TO_LIMIT, TOP_GROWER

__all__ = [
    "BINDING",
    "CONTRACT",
    "GROWER_KINDS",
    "HORIZONS",
    "LOCAL",
    "NOISE_BAND_SWINGS",
    "RECORDED",
    "TIME_TO_LIMIT",
    "TOP_GROWER",
    "Forecast",
    "Grower",
    "History",
    "Point",
    "Rise",
    "Windows",
    "Workload",
    "between",
    "by_pod",
    "climb_start",
    "from_recorded",
    "grower_text",
    "growing",
    "kind_growth",
    "local_forecast",
    "mark_binding",
    "peak_headroom_swings",
    "pod_forecasts",
    "process_growth",
    "recorded_queries",
    "rose_most",
    "slope",
    "soonest",
    "tightest",
    "time_to_limit_by_horizon",
    "tolerance",
    "top_grower",
]
