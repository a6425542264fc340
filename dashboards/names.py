"""Where the dashboards get the rules' names and knobs: the one import of them.

Recording-rule names, the rules' config (thresholds, windows, runbook URLs), the PromQL
selector builder and duration format all come from ``exporter.promql`` (the catalogue's
PromQL half), metric names from ``exporter.catalog``. The dashboards never import
``alerts/``: a test checks it.
"""

from __future__ import annotations

from exporter import promql as RULE
from exporter.promql import ALERT_NAMES, CONFIG, RECORDING_RULES, by, selector, series
from exporter.promql import duration as promql_duration

__all__ = ["ALERT_NAMES", "CONFIG", "RECORDING_RULES", "RULE", "by", "promql_duration",
           "selector", "series"]
