"""``dashboards.upgrade``: grafanalib's Grafana 6/7 era JSON -> Grafana's current
dashboard model, on small literal dashboards (no grafanalib needed: plain JSON in and
out). The committed dashboards are checked against the model itself in
test_dashboards_model.py and test_dashboards_schema.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dashboards.upgrade import REFRESH_INTERVALS, SCHEMA_VERSION, upgrade

ROOT = Path(__file__).resolve().parents[2]
Json = dict[str, Any]


def raw(*, panels: Sequence[Json] = (), variables: Sequence[Json] = (), **extra: Any) -> Json:
    """A grafanalib-shaped dashboard: legacy keys and nulls included."""
    return {
        "title": "t", "uid": "u", "schemaVersion": 12, "version": 0, "style": "dark",
        "hideControls": False, "id": None, "gnetId": None,
        "annotations": {"list": [{"name": "kill", "enable": True}]},
        "panels": list(panels), "templating": {"list": list(variables)}, **extra,
    }


def panel(type_: str, **extra: Any) -> Json:
    return {"type": type_, "title": "p", "id": 1, "maxDataPoints": 100, "repeat": None,
            "maxPerRow": None, "span": 6, "targets": [], **extra}


def test_the_dashboard_level_is_the_current_model() -> None:
    d = upgrade(raw())
    assert d["schemaVersion"] == SCHEMA_VERSION == 41
    assert (d["version"], d["fiscalYearStartMonth"]) == (1, 0)
    for legacy in ("style", "hideControls", "id", "gnetId"):
        assert legacy not in d
    assert d["timepicker"] == {"hidden": False, "refresh_intervals": REFRESH_INTERVALS}
    assert d["annotations"]["list"] == [{"name": "kill", "enable": True, "builtIn": 0}]
    assert d["links"] == []


def test_nulls_are_dropped_but_a_threshold_base_step_keeps_its_null() -> None:
    steps = [{"color": "green", "value": None}, {"color": "red", "value": 1}]
    p = panel("stat", description=None, options={"reduceOptions": {"calcs": ["last"]}},
              fieldConfig={"defaults": {"thresholds": {"mode": "absolute", "steps": steps},
                                        "unit": None}})
    out = upgrade(raw(panels=[p]))["panels"][0]
    assert "description" not in out
    assert "unit" not in out["fieldConfig"]["defaults"]
    assert out["fieldConfig"]["defaults"]["thresholds"]["steps"] == steps


def test_a_panel_loses_legacy_keys_and_gets_the_required_ones() -> None:
    out = upgrade(raw(panels=[panel("timeseries", options={"legend": {"calcs": ["max"]}})]))
    p = out["panels"][0]
    assert "span" not in p and "maxDataPoints" not in p  # 100: grafanalib's default
    assert "repeat" not in p and "maxPerRow" not in p
    assert (p["transparent"], p["repeatDirection"], p["links"]) == (False, "h", [])
    assert p["options"]["legend"] == {"calcs": ["max"], "displayMode": "list",
                                      "placement": "bottom", "showLegend": True}
    assert p["options"]["tooltip"] == {"mode": "multi", "sort": "desc"}
    assert p["fieldConfig"] == {"defaults": {"links": []}, "overrides": []}


def test_a_target_is_a_code_mode_range_or_instant_query() -> None:
    targets = [{"expr": "up", "refId": "A", "instant": False, "step": 10, "hide": False,
                "interval": ""},
               {"expr": "up", "refId": "B", "instant": True, "intervalFactor": 2}]
    a, b = upgrade(raw(panels=[panel("timeseries", targets=targets)]))["panels"][0]["targets"]
    assert a == {"expr": "up", "refId": "A", "editorMode": "code", "range": True,
                 "instant": False}
    assert b == {"expr": "up", "refId": "B", "editorMode": "code", "range": False,
                 "instant": True}


def test_a_table_cell_draws_by_cell_options_not_display_mode() -> None:
    p = panel("table", options={}, fieldConfig={"defaults": {"custom": {
        "displayMode": "auto", "filterable": True}}, "overrides": []})
    out = upgrade(raw(panels=[p]))["panels"][0]
    assert out["fieldConfig"]["defaults"]["custom"] == {
        "align": "auto", "cellOptions": {"type": "auto"}, "filterable": True,
        "inspect": False}
    assert out["options"]["cellHeight"] == "sm"


def test_a_row_keeps_only_row_keys_and_upgrades_the_panels_it_holds() -> None:
    inner = panel("stat", options={"reduceOptions": {}})
    row = {"type": "row", "title": "r", "id": 2, "collapsed": True, "links": [],
           "transformations": [], "repeat": None, "panels": [inner]}
    out = upgrade(raw(panels=[row]))["panels"][0]
    assert set(out) == {"type", "title", "id", "collapsed", "panels"}
    assert out["panels"][0]["options"]["wideLayout"] is True


def test_data_links_keep_title_url_and_new_tab_only() -> None:
    link = {"title": "pod", "url": "/d/x", "targetBlank": None, "type": "link"}
    p = panel("bargauge", options={"reduceOptions": {}},
              fieldConfig={"defaults": {"links": [link]}, "overrides": [
                  {"matcher": {"id": "byName", "options": "pod"},
                   "properties": [{"id": "links", "value": [link]}]}]})
    out = upgrade(raw(panels=[p]))["panels"][0]["fieldConfig"]
    expected = [{"title": "pod", "url": "/d/x", "targetBlank": False}]
    assert out["defaults"]["links"] == expected
    assert out["overrides"][0]["properties"][0]["value"] == expected


@pytest.mark.parametrize(("variable", "current"), [
    ({"type": "datasource", "current": {"value": "default"}}, None),
    ({"type": "query", "current": {"value": None}}, None),
    ({"type": "query", "current": {"value": "$__all"}, "multi": True},
     {"selected": True, "text": ["All"], "value": ["$__all"]}),
    ({"type": "query", "current": {"value": "headroom"}, "multi": True},
     {"selected": True, "text": ["headroom"], "value": ["headroom"]}),
    ({"type": "query", "current": {"value": "ns"}},
     {"selected": True, "text": "ns", "value": "ns"}),
])
def test_a_variable_selects_its_value_in_the_current_shape(
    variable: Json, current: Json | None,
) -> None:
    v = {"name": "v", "definition": "legacy", "options": [{"text": "x"}], **variable}
    out = upgrade(raw(variables=[v]))["templating"]["list"][0]
    assert out.get("current") == current
    assert "definition" not in out
    assert out["options"] == []  # a query or data source variable lists its own
    assert (out["allowCustomValue"], out["skipUrlSync"], out["regex"]) == (True, False, "")
    assert (out["multi"], out["includeAll"]) == (bool(variable.get("multi")), False)


def test_a_custom_variable_keeps_its_fixed_options() -> None:
    options = [{"selected": True, "text": "vLLM pods", "value": "x"}]
    v = {"name": "scope", "type": "custom", "options": options, "current": {"value": "x"}}
    assert upgrade(raw(variables=[v]))["templating"]["list"][0]["options"] == options


def test_the_upgrade_needs_no_grafanalib() -> None:
    """The module is plain JSON to plain JSON: it imports with grafanalib hidden."""
    code = ("import sys; sys.modules['grafanalib'] = None; sys.modules['attr'] = None; "
            "import dashboards.upgrade")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
