"""The dashboards on Grafana's current model, checked by Grafana's own typed model.

grafana-foundation-sdk (pinned in the test extras: the Grafana 11.6 build, schemaVersion
41) parses every generated dashboard with ``Dashboard.from_json`` and writes it back.
The SDK silently drops every key its model does not know, and fills every required field
that was left out with its own default (``showLegend`` false among them), so:

- a key in our JSON that is missing after the round trip is legacy or misplaced: fail;
- a key the SDK adds is a required field we did not set: fail, except the few listed in
  ``SDK_ADDS`` with the reason the SDK writes them;
- a value the SDK changes (an enum it does not know, a wrong type): fail.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from dashboards import generate, upgrade
from tests.unit.test_dashboards import all_panels

pytest.importorskip("grafana_foundation_sdk", reason="pip install -e .[test]")

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

register_default_plugins()

# Paths (list indices as []) the SDK writes although we leave them out, and why.
SDK_ADDS: dict[str, str] = {
    # The SDK types a field's data links as dashboard links (DashboardLink): it adds
    # that type's fields to every data link. Grafana's data link is {title, url,
    # targetBlank}; the extra keys would be noise in Grafana's JSON.
    r"(/panels\[\])+/fieldConfig/defaults/links\[\]/"
    r"(asDropdown|icon|includeVars|keepTime|tags|tooltip|type)": "data links typed as "
    "dashboard links",
    r"(/panels\[\])+/fieldConfig/overrides\[\]/properties\[\]/value\[\]/"
    r"(asDropdown|icon|includeVars|keepTime|tags|tooltip|type)": "same, in overrides",
    # Fields of interval variables, written on every variable type.
    r"/templating/list\[\]/(auto|auto_count|auto_min)": "interval-variable fields",
    # Required in 11.6's table model, removed from the current one (@grafana/schema 13,
    # tests/unit/test_dashboards_schema.py): a footer is a field option there.
    r"/panels\[\]/options/footer/(show|reducer|countRows)": "11.6's table footer",
    r"/annotations/list\[\]/target/(limit|matchAny|tags|type)": "11.6's annotation "
    "target (the built-in datasource's fields)",
}

# Paths the 11.6 SDK drops that the current model has, and why.
SDK_DROPS: dict[str, str] = {
    # 11.6 types an annotation's target as the built-in Grafana datasource's
    # (limit, matchAny, tags, type); the current model puts the datasource's own query
    # there: the Prometheus annotation's expr (the top-level expr is gone from it).
    r"/annotations/list\[\]/target/(refId|expr|datasource/type|datasource/uid)":
    "11.6's annotation target",
}


def leaves(obj: Any, path: str = "") -> dict[str, Any]:
    """Every leaf (and empty container) of a JSON value by its path."""
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(leaves(v, f"{path}/{k}"))
        return out
    if isinstance(obj, list) and obj:
        out = {}
        for i, v in enumerate(obj):
            out.update(leaves(v, f"{path}[{i}]"))
        return out
    return {path: obj}


def shape(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


def round_trip(d: dict[str, Any]) -> dict[str, Any]:
    back: dict[str, Any] = json.loads(json.dumps(Dashboard.from_json(d), cls=JSONEncoder))
    return back


def differences(d: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(dropped paths, added paths not in SDK_ADDS, changed values) of a round trip."""
    before, after = leaves(d), leaves(round_trip(d))
    # A container that the SDK fills is not dropped: compare leaves under it.
    dropped = [p for p in before if p not in after
               and not any(q.startswith(p + "/") or q.startswith(p + "[") for q in after)
               and not any(re.fullmatch(rx, shape(p)) for rx in SDK_DROPS)]
    added = [p for p in after if p not in before
             and not any(q.startswith(p + "/") or q.startswith(p + "[") for q in before)
             and not any(re.fullmatch(rx, shape(p)) for rx in SDK_ADDS)]
    changed = [f"{p}: {before[p]!r} -> {after[p]!r}" for p in before
               if p in after and before[p] != after[p]]
    return dropped, added, changed


@pytest.fixture(scope="module")
def models() -> dict[str, dict[str, Any]]:
    return generate.dashboards()


def test_pinned_sdk_is_the_current_model() -> None:
    from importlib.metadata import version

    v = version("grafana-foundation-sdk")  # e.g. 1769699379!11.6.0: epoch!Grafana version
    grafana = tuple(int(x) for x in v.split("!")[-1].split(".")[:2])
    assert grafana >= (11, 6), v
    assert Dashboard().schema_version == upgrade.SCHEMA_VERSION == 41


@pytest.mark.parametrize("name", ["headroom-pod", "headroom-fleet", "headroom-node",
                                  "headroom-exporter"])
def test_sdk_round_trip_drops_adds_and_changes_nothing(
    models: dict[str, dict[str, Any]], name: str,
) -> None:
    dropped, added, changed = differences(models[name])
    assert not dropped, f"{name}: keys the current model does not know: {dropped[:20]}"
    assert not added, f"{name}: required fields left to the SDK's defaults: {added[:20]}"
    assert not changed, f"{name}: values the model reads differently: {changed[:20]}"


def test_the_check_catches_legacy_and_missing_fields(
    models: dict[str, dict[str, Any]],
) -> None:
    """The round-trip check fails on what grafanalib writes and the current model lacks:
    legacy keys, a left-out required field (a hidden legend), a row's links, a
    variable's definition."""
    d = json.loads(json.dumps(models["headroom-pod"]))
    ts = next(p for p in d["panels"] if p["type"] == "timeseries")
    del ts["options"]["legend"]["showLegend"]
    ts["options"]["legend"]["displayMode"] = "hidden"  # fine: a value the model knows
    table = {"type": "table", "id": 999, "title": "t", "fieldConfig": {
        "defaults": {"custom": {"displayMode": "color-background"}}, "overrides": []}}
    d["panels"].append(table)
    row = next(p for p in d["panels"] if p["type"] == "row")
    row["links"] = []
    d["templating"]["list"][2]["definition"] = "label_values(x, y)"
    d["annotations"]["list"][0]["titleFormat"] = "OOM kill"
    dropped, added, _ = differences(d)
    assert "/panels[0]/options/legend/showLegend" not in dropped
    assert any(p.endswith("/options/legend/showLegend") for p in added), added
    shapes = {shape(p) for p in dropped}
    assert "/panels[]/links" in shapes
    assert "/templating/list[]/definition" in shapes
    assert "/annotations/list[]/titleFormat" in shapes
    # The SDK keeps `custom` as free JSON: the legacy table key is our own check's job.
    assert d["panels"][-1]["fieldConfig"]["defaults"]["custom"]["displayMode"]


def test_no_legacy_keys(models: dict[str, dict[str, Any]]) -> None:
    """What the SDK cannot see (free-form ``custom``, options): the legacy keys that
    current Grafana migrates away on load."""
    legacy = {"displayMode": "table cells: cellOptions.type",
              "fieldOptions": "Grafana 6 bar gauge/stat options",
              "span": "Grafana 4 row layout", "height": "Grafana 4 row layout",
              "rows": "Grafana 4 rows", "definition": "variables: the query says it"}
    for name, d in models.items():
        for p in all_panels(d):
            custom = p.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
            assert "displayMode" not in custom, (name, p["title"], legacy["displayMode"])
            assert "fieldOptions" not in p.get("options", {}), (name, p["title"])
            assert not {"span", "height"} & set(p), (name, p["title"])
        assert "rows" not in d
        for v in d["templating"]["list"]:
            assert "definition" not in v, (name, v["name"])


def test_legends_are_shown(models: dict[str, dict[str, Any]]) -> None:
    for name, d in models.items():
        for p in all_panels(d):
            if p["type"] == "timeseries":
                assert p["options"]["legend"]["showLegend"] is True, (name, p["title"])
