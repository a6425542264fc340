"""What the dashboards show where: the pod dashboard's first screen, OOM counts that work
on cgroup v1 and v2, colours by kind, links (runbooks, post-mortems, between dashboards),
and the thresholds a panel shows coming from the rules' config."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from dashboards import generate, layout, selectors, style
from dashboards.names import ALERT_NAMES, CONFIG
from tests.unit.test_dashboards import all_panels

ROOT = Path(__file__).resolve().parents[2]
FIRST = layout.FIRST_SCREEN_UNITS


@pytest.fixture(scope="module")
def models() -> dict[str, dict[str, Any]]:
    return generate.dashboards()


def first_screen(d: dict[str, Any]) -> list[dict[str, Any]]:
    """Panels drawn without scrolling on 1920x1080 (page level, bottom edge inside)."""
    return [p for p in d["panels"] if p["type"] != "row"
            and p["gridPos"]["y"] + p["gridPos"]["h"] <= FIRST]


def by_title(d: dict[str, Any], title: str) -> dict[str, Any]:
    return next(p for p in all_panels(d) if p["title"] == title)


TILES = ["Time to limit", "Headroom", "Unreclaimable / limit", "Top grower",
         "Hidden memory growth", "OOM kills in range"]


def test_pod_first_screen_answers_how_close_when_what_where(
    models: dict[str, dict[str, Any]],
) -> None:
    d = models["headroom-pod"]
    screen = first_screen(d)
    titles = [p["title"] for p in screen]
    assert titles[:6] == TILES
    for p in screen[:6]:
        assert p["type"] == "stat" and p["gridPos"]["y"] == 0, p["title"]
        # Instant: evaluated at the end of the range, so an ended series shows nothing
        # (a stale countdown in red), never its last value.
        assert all(t["instant"] and not t["range"] for t in p["targets"]), p["title"]
    charts = {p["title"]: p for p in screen[6:]}
    assert set(charts) == {
        "Unreclaimable against the limit (tightest cgroup)",
        "Pod usage by process, no process, page cache",
        "What grows: per process and hidden, bytes/s",
        "vLLM KV cache and CPU offload against the headroom",
    }
    # Everything else sits below the first screen, the detail rows collapsed.
    below = [p for p in d["panels"] if p not in screen]
    assert all(p["gridPos"]["y"] >= FIRST - 1 for p in below)
    collapsed = {p["title"] for p in d["panels"] if p["type"] == "row" and p["collapsed"]}
    inside = {x["title"] for p in d["panels"] if p["type"] == "row" for x in p["panels"]}
    assert {"Memory pressure (PSI stall time)", "Memory events (reclaim at the limit, OOM)",
            "Swap in use", "Processes by name", "Charged to the pod outside its containers",
            "vLLM /metrics read"} <= inside
    assert len(collapsed) == 2


def test_tiles_read_one_cgroup_with_the_alerts_thresholds(
    models: dict[str, dict[str, Any]],
) -> None:
    d = models["headroom-pod"]
    steps = {t: by_title(d, t)["fieldConfig"]["defaults"]["thresholds"] for t in TILES}
    assert [s["value"] for s in steps["Time to limit"]["steps"]] == [
        None, CONFIG.fill_critical_horizon_s, CONFIG.fill_warning_horizon_s]
    assert [s["color"] for s in steps["Time to limit"]["steps"]] == ["red", "orange", "green"]
    ratio = steps["Unreclaimable / limit"]["steps"]
    assert [s["value"] for s in ratio] == [None, CONFIG.high_ratio,
                                          CONFIG.near_limit_ratio]
    head = steps["Headroom"]
    assert head["mode"] == "percentage"
    assert [s["value"] for s in head["steps"]] == [
        None, pytest.approx((1 - CONFIG.near_limit_ratio) * 100),
        pytest.approx((1 - CONFIG.high_ratio) * 100)]
    # The headroom tile's maximum is the limit of the same cgroup (configFromData).
    headroom = by_title(d, "Headroom")
    assert headroom["transformations"][0]["id"] == "configFromData"
    assert "bottomk(1," in headroom["targets"][1]["expr"]
    # The first three tiles all pick the tightest cgroup (least headroom).
    for t in ("Headroom", "Unreclaimable / limit", "Time to limit"):
        assert "headroom:memory_binding:bool" in json.dumps(by_title(d, t)["targets"])
    grow = by_title(d, "Top grower")
    assert grow["options"]["textMode"] == "value_and_name"
    assert grow["targets"][0]["legendFormat"] == "{{process}} {{kind}}"
    # Both forecast tiles read the recorded contract series on the binding cgroup and
    # say "rules missing" (not "No data") without the recording rules.
    for t in ("Time to limit", "Top grower"):
        p = by_title(d, t)
        assert "headroom:memory_binding:bool" in p["targets"][0]["expr"]
        assert p["options"]["reduceOptions"] is not None
        texts = [m["options"]["-1"]["text"] for m in p["fieldConfig"]["defaults"]["mappings"]]
        assert texts == ["rules missing"], t


@pytest.mark.parametrize("uid,title", [
    ("headroom-pod", "OOM kills in range"),
    ("headroom-fleet", "OOM kills in range"),
    ("headroom-node", "OOM kills in range"),
])
def test_oom_counts_work_on_v1_and_v2(
    models: dict[str, dict[str, Any]], uid: str, title: str,
) -> None:
    """cgroup v1 counts a kill only in the victim's own cgroup: a count that reads the
    pod level alone reads 0 there. Every OOM count combines the pod cgroup,
    the containers and the watcher, rounded."""
    d = next(m for m in models.values() if m["uid"] == uid)
    expr = by_title(d, title)["targets"][0]["expr"]
    assert expr.count("round(") == 1
    assert 'container=""' in expr and 'container!=""' in expr
    assert "headroom_oom_kills_total" in expr and 'event="oom_kill"' in expr


def test_oom_annotation_and_alert_annotation(models: dict[str, dict[str, Any]]) -> None:
    annotations = {a["name"]: a for a in models["headroom-pod"]["annotations"]["list"]}
    oom = annotations["OOM kill"]["target"]["expr"]
    assert "round(" in oom and 'container!=""' in oom and "headroom_oom_kills_total" in oom
    alerts = annotations["Firing headroom alert"]["target"]["expr"]
    assert alerts.startswith('ALERTS{alertname=~"Headroom.*", alertstate="firing"')


def test_kind_colours_are_fixed_by_name(models: dict[str, dict[str, Any]]) -> None:
    warm = {"red", "orange", "yellow", "dark-yellow", "dark-orange", "dark-red"}
    cool = {"blue", "super-light-blue"}
    for kind, colour in style.KIND_COLOURS.items():
        assert colour in (cool if kind.startswith("file") else warm), kind
    d = models["headroom-pod"]
    for title in ("Pod cgroup: memory by kind", "Containers: memory by kind"):
        p = by_title(d, title)
        legends = {t["legendFormat"] for t in p["targets"]}
        colours = {o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"]
                   for o in p["fieldConfig"]["overrides"]
                   if o["properties"][0]["id"] == "color"}
        for kind in legends & set(style.KIND_COLOURS):
            assert colours[kind] == style.KIND_COLOURS[kind], (title, kind)
        assert p["fieldConfig"]["defaults"]["color"]["mode"] != "thresholds"


def test_tmpfs_drawn_against_headroom_size_in_legend(
    models: dict[str, dict[str, Any]],
) -> None:
    p = by_title(models["headroom-pod"], "tmpfs used against the pod's headroom")
    legends = [t["legendFormat"] for t in p["targets"]]
    assert legends == ["{{mount}} used", "{{mount}} size", "pod headroom"]
    size = next(o for o in p["fieldConfig"]["overrides"]
                if o["matcher"]["options"] == ".* size$")
    assert size["properties"][0]["value"]["viz"] is True  # not drawn: no node-sized axis
    assert size["properties"][0]["value"]["legend"] is False


def test_young_pods_have_a_baseline(models: dict[str, dict[str, Any]]) -> None:
    """The rules' baseline rise needs two windows of data; the fleet's growth columns
    fall back to growth since the pod's floor in one window (since start when younger)."""
    fleet = models["headroom-fleet"]
    table = by_title(fleet, "Pods ranked by time to limit")
    growth = [t["expr"] for t in table["targets"]]
    assert sum("min_over_time(" in e for e in growth) >= 2


def test_pod_variable_defaults_to_vllm_pods(models: dict[str, dict[str, Any]]) -> None:
    v = next(v for v in models["headroom-pod"]["templating"]["list"] if v["name"] == "pod")
    assert v["sort"] == 0 and "sort_desc(" in v["query"]
    assert "current" not in v  # Grafana takes the first option: a vLLM pod
    assert selectors.VLLM_PROCESSES in v["query"]


def test_every_alert_has_its_runbook_linked(models: dict[str, dict[str, Any]]) -> None:
    blob = json.dumps(models)
    for name in ALERT_NAMES:
        if name in ("HeadroomExporterDown", "HeadroomCollectorFailing"):
            continue  # checked on the exporter dashboard below
        assert CONFIG.runbook_url(name) in blob, name
    exporter = json.dumps(models["headroom-exporter"])
    for name in ("HeadroomExporterDown", "HeadroomCollectorFailing",
                 "HeadroomVLLMScrapeFailing"):
        assert CONFIG.runbook_url(name) in exporter, name


def test_links_between_dashboards_carry_variables(models: dict[str, dict[str, Any]]) -> None:
    uids = {d["uid"] for d in models.values()}
    for d in models.values():
        links = d["links"]
        assert links[0]["type"] == "dashboards" and links[0]["includeVars"]
        for link in links[1:]:
            if "/d/" in link["url"]:
                target = re.search(r"/d/([\w-]+)/", link["url"])
                assert target and target.group(1) in uids
                assert "var-datasource=${datasource}" in link["url"]
                assert "${job:queryparam}" in link["url"]
                assert "${__url_time_range}" in link["url"]
    pod = models["headroom-pod"]
    assert any("/debug/oom/" in x["url"] for x in pod["links"])
    tile = by_title(pod, "OOM kills in range")
    assert any("/debug/oom/" in x["url"] for x in tile["fieldConfig"]["defaults"]["links"])
    # Every dashboard is reachable from another one (pods by data links).
    linked = set(re.findall(r"/d/([\w-]+)/", json.dumps(models)))
    assert linked == uids


def test_dashboards_never_import_alerts() -> None:
    """Names and thresholds come from exporter.promql / exporter.catalog, never from the
    rules' own code."""
    for path in sorted((ROOT / "dashboards").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("alerts"), path.name
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("alerts") for a in node.names), path.name


def test_no_threshold_literals_in_sources() -> None:
    """Thresholds a panel shows come from the rules' config: no 0.85/0.95/3600-style
    literals in the dashboard sources."""
    sections = sorted((ROOT / "dashboards" / "pod").glob("*.py"))
    for path in [*sorted((ROOT / "dashboards").glob("*.dashboard.py")), *sections]:
        text = path.read_text()
        for literal in ("0.85", "0.95", "0.9,", "3600", "43200"):
            assert literal not in text, (path.name, literal)
