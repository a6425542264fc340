"""Meta-monitoring: the exporter itself down, or one of its collectors failing.
"""

from __future__ import annotations

from exporter import catalog as c
from exporter.promql import Config, duration, expr, series

from .build import Rule, alerting_rule, exported


def exporter_down(config: Config) -> Rule:
    up = series("up", config.selector)
    return alerting_rule(
        config, "HeadroomExporterDown", f"{up} == 0\nor\nabsent({up})", "warning",
        config.exporter_down_for_s,
        "headroom exporter {{ with $labels.instance }}{{ . }} {{ end }}is down.",
        "Prometheus cannot scrape the headroom exporter"
        "{{ with $labels.instance }} at {{ . }}{{ end }}: none of headroom's memory "
        "alerts can fire for the pods on that node.",
    )


def collector_failing(config: Config) -> Rule:
    condition = expr(
        "avg_over_time(${success}[${w}]) < 0.5",
        success=exported(config, c.COLLECTOR_SUCCESS), w=duration(config.collector_window_s),
    )
    return alerting_rule(
        config, "HeadroomCollectorFailing", condition, "warning", config.collector_for_s,
        "headroom collector {{ $labels.collector }} on {{ $labels.instance }} is failing.",
        "The {{ $labels.collector }} collector of the headroom exporter on "
        "{{ $labels.instance }} succeeded on only {{ $value | humanizePercentage }} of "
        f"scrapes over {duration(config.collector_window_s)}: the series it feeds are "
        "missing or stale. See the exporter's log.",
    )
