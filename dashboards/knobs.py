"""What a dashboard takes from the rules' config: windows, horizons, the alerts'
thresholds as colour steps and the runbook links.

Every ``*.dashboard.py`` builds its panels from one ``Knobs`` made of the config it is
drawn for (``dashboard(config)``), so a panel says what the alert of that deployment
means: the shipped config for the committed JSON, a scaled one for a live test whose
windows are shortened. Nothing here is read at import time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dashboards.names import Config, promql_duration
from dashboards.style import thresholds

Json = dict[str, Any]


@dataclass(frozen=True)
class Knobs:
    config: Config

    @property
    def deriv(self) -> str:
        """The trend window of every slope and projection (as PromQL)."""
        return promql_duration(self.config.slope_window_s)

    @property
    def baseline(self) -> str:
        """The baseline window: growth is measured from the floor over it."""
        return promql_duration(self.config.baseline_window_s)

    @property
    def critical_s(self) -> int:
        return self.config.fill_critical_horizon_s

    @property
    def warning_s(self) -> int:
        return self.config.fill_warning_horizon_s

    @property
    def critical(self) -> str:
        return promql_duration(self.critical_s)

    @property
    def min_growth_bps(self) -> float:
        """Sustained growth as the rules define it, per second: the growth tiles' floor."""
        return self.config.min_baseline_rise_bytes / self.config.baseline_window_s

    @property
    def min_hidden_growth_bps(self) -> float:
        return self.config.hidden_min_rise_bytes / self.config.baseline_window_s

    @property
    def time_steps(self) -> list[Json]:
        """Time to the limit, as the FillingUp alert's horizons colour it."""
        return thresholds(("red", 0), ("orange", self.critical_s), ("green", self.warning_s))

    @property
    def ratio_steps(self) -> list[Json]:
        """Unreclaimable / limit, as NearLimit (red) and ReclaimAtLimit (orange) read it."""
        return thresholds(("green", 0), ("orange", self.config.high_ratio),
                          ("red", self.config.near_limit_ratio))

    @property
    def headroom_percent_steps(self) -> list[Json]:
        """The same two lines as headroom left, in percent of the limit."""
        return thresholds(
            ("red", 0),
            ("orange", round((1 - self.config.near_limit_ratio) * 100, 6)),
            ("green", round((1 - self.config.high_ratio) * 100, 6)),
        )

    def runbooks(self, *alertnames: str) -> list[Json]:
        """Panel links (the panel header's link menu) to alerts' runbooks: the URLs their
        runbook_url annotations carry. Panel links are dashboard links in the current
        model, hence every field."""
        return [{
            "asDropdown": False, "icon": "doc", "includeVars": False, "keepTime": False,
            "tags": [], "targetBlank": True, "title": f"Runbook: {name}",
            "tooltip": f"What to do when {name} fires", "type": "link",
            "url": self.config.runbook_url(name),
        } for name in alertnames]

    def growth_since_baseline(self, series: str) -> str:
        """Each series minus its own lowest value over the baseline window: what grew
        since its floor; for a pod younger than the window, since it started (the young
        pods' fallback: the rules' baseline rise needs two windows of data)."""
        return f"({series} - min_over_time({series}[{self.baseline}]))"
