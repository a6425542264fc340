"""Where the dashboards get the rules' names and knobs: the one import of them.

Recording-rule names, the rules' config (thresholds, windows, runbook URLs), the PromQL
selector builder and duration format all come from ``exporter.promql`` (the catalogue's
PromQL half), metric names from ``exporter.catalog``. The dashboards never import
``alerts/``: a test checks it.
"""

from __future__ import annotations

from exporter import promql as RULE
from exporter.oncall import forecast as FORECAST
from exporter.promql import ALERT_NAMES, CONFIG, Config, by, selector, series
from exporter.promql import RECORDING_RULES as _RULES
from exporter.promql import duration as promql_duration

# The forecast's series (recorded by the shipped rules; the on-call tools and the pod
# dashboard's first screen read the same ones), with the rules' other names.
RECORDING_RULES: tuple[str, ...] = tuple(dict.fromkeys((*_RULES, *FORECAST.CONTRACT)))

__all__ = ["ALERT_NAMES", "CONFIG", "FORECAST", "RECORDING_RULES", "RULE", "Config", "by",
           "promql_duration", "selector", "series"]
