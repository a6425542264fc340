"""Dashboards: generated JSON is committed and deterministic, follows the grafana
dashboard-linter rules that fit headroom, imports into current Grafana, and every query
is PromQL a real Prometheus accepts.

Lint rules carried over from grafana/dashboard-linter (and why some are adapted):
- template-datasource-rule: a ``datasource`` variable (type datasource, Prometheus).
- template-job-rule: a ``job`` query variable on ``$datasource``, multi, All = ``.+``.
- template-on-time-change-reload: query variables refresh on time-range change.
- panel-datasource-rule: every panel and target uses ``{type, uid: ${datasource}}``.
- panel-title-description-rule: every panel has a title and a description.
- panel-units-rule: timeseries/stat/bargauge set a valid unit; tables set one per value
  column (override).
- panel-no-targets-rule: no panel without targets except rows and text.
- target-rate-interval-rule: rate/irate/increase over ``$__rate_interval``; instant
  queries (stats, tables, bar gauges of "the selected range") may use ``$__range``.
- target-counter-agg-rule: a ``_total`` counter only inside rate/irate/increase (and
  resets/changes, which are counter functions too).
- target-job-rule: every raw headroom series selects ``job=~"$job"``; recording rules
  carry no job label, so every query that reads one joins it to a raw series that does.
- plus: every metric name exists in ``exporter.catalog`` or the recording rules (or is
  one of a few series Prometheus writes for every target), every ``$variable`` used is
  defined, data links point at existing dashboards, runbooks name real dashboards.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dashboards
from dashboards import generate
from dashboards.names import RECORDING_RULES
from exporter import catalog
from exporter.artifacts.generate import TABLE
from tests.helpers.net import free_port

ROOT = Path(__file__).resolve().parents[2]
DS = {"type": "prometheus", "uid": "${datasource}"}
PANEL_TYPES = {"timeseries", "stat", "table", "bargauge", "row", "text"}
# A subset of Grafana's unit ids (dashboard-linter's list): the ones headroom may use.
VALID_UNITS = {"bytes", "decbytes", "s", "ms", "percentunit", "percent", "short", "none",
               "reqps", "ops", "Bps", "binBps", "bool"}
# Series Prometheus itself writes for every target, or a client library adds.
EXTERNAL = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
            "process_resident_memory_bytes"}
# Prometheus's own series of firing alerts (the rules' labels, no job).
RULE_SERIES = {"ALERTS"}
KNOWN = {m.name for m in catalog.ALL} | set(RECORDING_RULES) | EXTERNAL | RULE_SERIES
CATALOG_NAMES = {m.name for m in catalog.ALL}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "offset", "bool", "inf", "nan", "Inf", "NaN"}
BUILTIN_VARS = {"__rate_interval", "__range", "__interval", "__all"}

STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
IDENT = re.compile(r"(?<![\w:.$])[a-zA-Z_:][\w:]*")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
RANGE_FN = re.compile(
    r"\b(rate|irate|increase)\s*\(\s*[a-zA-Z_:][\w:]*\s*(?:\{[^}]*\})?\s*\[([^\]]*)\]\s*\)"
)
COUNTER_FN = re.compile(
    r"\b(?:rate|irate|increase|resets|changes)\s*\(\s*([a-zA-Z_:][\w:]*)\s*"
    r"(?:\{[^}]*\})?\s*\[[^\]]*\]\s*\)"
)
VAR = re.compile(r"\$\{?([a-zA-Z_]\w*)")

# Where the chart keeps its copies of the dashboards (exporter/artifacts/generate.py TABLE).
CHART_DASHBOARDS = next(p.chart_copies for p in TABLE if p.name == "dashboards")


# --- helpers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models() -> dict[str, dict[str, Any]]:
    return generate.dashboards()


def all_panels(d: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])


def targets(d: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for p in all_panels(d):
        for t in p.get("targets", []):
            yield p, t


def strip_strings(expr: str) -> str:
    return STRING.sub('""', expr)


def metric_names(expr: str) -> set[str]:
    """Identifiers of an expression that are metric names (not functions, keywords,
    labels of matchers or grouping clauses, durations or strings)."""
    s = strip_strings(expr)
    s = re.sub(r"\{[^}]*\}", "", s)
    s = re.sub(r"\[[^\]]*\]", "", s)
    s = GROUPING.sub("", s)
    names = set()
    for m in IDENT.finditer(s):
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or m.group() in KEYWORDS:
            continue  # a function or an aggregation
        names.add(m.group())
    return names


def rate_violations(expr: str, instant: bool) -> list[str]:
    s = strip_strings(expr)
    found = len(re.findall(r"\b(?:rate|irate|increase)\s*\(", s))
    ok = RANGE_FN.findall(s)
    bad = [f"{fn}(...[{rng}])" for fn, rng in ok
           if rng != "$__rate_interval" and not (instant and rng == "$__range")]
    if len(ok) != found:
        bad.append("rate/irate/increase not applied directly to a range selector")
    return bad


def counter_violations(expr: str) -> list[str]:
    s = strip_strings(expr)
    spans = [m.span() for m in COUNTER_FN.finditer(s)]
    bad = []
    for m in IDENT.finditer(s):
        is_counter = m.group().endswith("_total")
        is_call = s[m.end():].lstrip().startswith("(")
        if is_counter and not is_call and not any(a <= m.start() < b for a, b in spans):
            bad.append(m.group())
    return bad


def job_violations(expr: str) -> list[str]:
    bad = []
    for name in CATALOG_NAMES | EXTERNAL:
        for m in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr):
            sel = re.match(r"\s*\{([^}]*)\}", expr[m.end():])
            if sel is None or 'job=~"$job"' not in sel.group(1):
                bad.append(name)
    return bad


def substitute_var(expr: str) -> str:
    """Template variables as a test can run them: every variable matches anything."""
    return re.sub(r"\$\{([a-zA-Z_]\w*)\}|\$([a-zA-Z_]\w*)", ".*",
                  expr.replace("$__rate_interval", "1m").replace("$__range", "1h"))


def variable_exprs(d: dict[str, Any]) -> list[tuple[str, str]]:
    """(variable, PromQL) inside label_values(...) / query_result(...) variable queries."""
    out = []
    for v in d["templating"]["list"]:
        if v["type"] != "query":
            continue
        q = v["query"] if isinstance(v["query"], str) else v["query"]["query"]
        m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q, re.S)
        m = m or re.fullmatch(r"query_result\((.*)\)", q, re.S)
        assert m, f"{d['uid']}: variable {v['name']}: unsupported query {q}"
        out.append((v["name"], m.group(1)))
    return out


# --- generated files ----------------------------------------------------------------------
def test_one_generator() -> None:
    """`headroom generate` is the one entry point: no `python -m dashboards.generate`."""
    assert not hasattr(generate, "main")
    assert "__main__" not in (ROOT / "dashboards" / "generate.py").read_text()


def test_generation_is_deterministic_and_committed() -> None:
    first, second = generate.artifacts(), generate.artifacts()
    assert first == second
    assert set(first) == {f"dashboards/{n}.json" for n in
                          ("headroom-fleet", "headroom-pod", "headroom-node",
                           "headroom-exporter")}
    for rel, text in first.items():
        assert (ROOT / rel).read_text() == text, rel
        chart_copy = ROOT / CHART_DASHBOARDS / Path(rel).name
        assert chart_copy.read_text() == text, chart_copy
        assert text.endswith("}\n") and text == generate.render(json.loads(text))
    assert not (ROOT / CHART_DASHBOARDS / "headroom-overview.json").exists()


def test_headroom_generate_collects_dashboards() -> None:
    from exporter.artifacts.generate import collect_artifacts

    out = collect_artifacts(ROOT)
    for rel, text in generate.artifacts().items():
        assert out[rel] == text
        assert out[f"{CHART_DASHBOARDS}/{Path(rel).name}"] == text


def test_queries_and_may_be_empty(models: dict[str, dict[str, Any]]) -> None:
    qs = dashboards.queries()
    assert len(qs) == sum(1 for d in models.values() for _ in targets(d)) + sum(
        len(d["annotations"]["list"]) for d in models.values())
    titles = {title for _, title, _ in qs}
    stale = set(dashboards.MAY_BE_EMPTY) - titles
    assert not stale, f"MAY_BE_EMPTY names no panel: {stale}"


# --- Grafana import shape --------------------------------------------------------------------
def test_current_grafana_model(models: dict[str, dict[str, Any]]) -> None:
    uids = set()
    for d in models.values():
        assert d["schemaVersion"] >= 39
        assert d["uid"] and d["title"].startswith("headroom / ")
        assert "rows" not in d
        uids.add(d["uid"])
        ids = [p["id"] for p in all_panels(d)]
        assert len(ids) == len(set(ids)), f"{d['uid']}: duplicate panel ids"
        for p in all_panels(d):
            assert p["type"] in PANEL_TYPES, (d["uid"], p["title"], p["type"])
        # The page, then each collapsed row as it is when opened.
        assert_no_overlap(d["uid"], d["panels"])
        for p in d["panels"]:
            if p["type"] == "row" and p["collapsed"]:
                assert p["panels"], f"{d['uid']}: empty collapsed row {p['title']}"
                assert min(x["gridPos"]["y"] for x in p["panels"]) == p["gridPos"]["y"] + 1
                assert_no_overlap(d["uid"], p["panels"])
            elif p["type"] == "row":
                assert not p["panels"], f"{d['uid']}: open row {p['title']} holds panels"
    assert uids == {"headroom-fleet", "headroom-pod", "headroom-node", "headroom-exporter"}


def assert_no_overlap(uid: str, panels: list[dict[str, Any]]) -> None:
    cells: set[tuple[int, int]] = set()
    for p in panels:
        gp = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(gp)
        assert gp["x"] >= 0 and gp["x"] + gp["w"] <= 24 and gp["h"] > 0
        for x in range(gp["x"], gp["x"] + gp["w"]):
            for y in range(gp["y"], gp["y"] + gp["h"]):
                assert (x, y) not in cells, f"{uid}: {p['title']} overlaps"
                cells.add((x, y))


# --- dashboard-linter rules -------------------------------------------------------------------
def test_template_datasource_and_job(models: dict[str, dict[str, Any]]) -> None:
    for d in models.values():
        vs = {v["name"]: v for v in d["templating"]["list"]}
        ds = vs["datasource"]
        assert ds["type"] == "datasource" and ds["query"] == "prometheus"
        assert ds["label"] == "Data source"
        job = vs["job"]
        assert job["type"] == "query" and job["datasource"] == DS
        assert job["multi"] and job["includeAll"] and job["allValue"] == ".+"
        assert job["current"]["value"] == ["headroom"]
        for v in vs.values():
            if v["type"] == "query":
                assert v["datasource"] == DS, v["name"]
                assert v["refresh"] == 2, f"{d['uid']}: {v['name']} must reload on time"


def test_panel_datasource_title_description_targets(
    models: dict[str, dict[str, Any]],
) -> None:
    for d in models.values():
        for p in all_panels(d):
            assert p.get("title"), (d["uid"], p)
            if p["type"] in ("row", "text"):
                continue
            where = f"{d['uid']}: {p['title']}"
            assert p.get("description"), f"{where}: no description"
            assert p["datasource"] == DS, where
            assert p.get("targets"), f"{where}: no targets"
            for t in p["targets"]:
                assert t["datasource"] == DS and t["expr"].strip(), where


def test_panel_units(models: dict[str, dict[str, Any]]) -> None:
    for d in models.values():
        for p in all_panels(d):
            where = f"{d['uid']}: {p['title']}"
            if p["type"] in ("timeseries", "stat", "bargauge"):
                assert p["fieldConfig"]["defaults"].get("unit") in VALID_UNITS, where
            if p["type"] == "table":
                units = [prop["value"] for o in p["fieldConfig"]["overrides"]
                         for prop in o["properties"] if prop["id"] == "unit"]
                assert len(units) == len(p["targets"]), where
                assert set(units) <= VALID_UNITS, where


def test_rate_interval(models: dict[str, dict[str, Any]]) -> None:
    for uid, title, expr in dashboards.queries():
        panel_instant = any(
            t["expr"] == expr and t.get("instant")
            for d in models.values() if d["uid"] == uid for _, t in targets(d))
        assert not rate_violations(expr, panel_instant), (uid, title, expr)


def test_counters_only_in_rate_functions() -> None:
    for uid, title, expr in dashboards.queries():
        assert not counter_violations(expr), (uid, title, expr)


def test_raw_series_select_job() -> None:
    for uid, title, expr in dashboards.queries():
        assert not job_violations(expr), (uid, title, expr)


def test_recording_rules_are_limited_to_job() -> None:
    """Recording rules keep no job label: every query that reads one joins it to a raw
    series of ``$job`` (selectors.jobbed), so the job variable reaches every panel."""
    for uid, title, expr in dashboards.queries():
        rules = metric_names(expr) & set(RECORDING_RULES)
        if rules:
            assert expr.count("and on (namespace, pod, container)") >= 1, (uid, title)
            assert 'job=~"$job"' in expr, (uid, title, expr)


def test_metric_names_exist() -> None:
    for uid, title, expr in dashboards.queries():
        unknown = metric_names(expr) - KNOWN
        assert not unknown, (uid, title, unknown, expr)
    assert "headroom_memory_bytes" in metric_names(
        'sum by (kind) (rate(headroom_memory_bytes{job=~"$job"}[1m] offset 1d)) > 1e9')


def test_variables_are_defined(models: dict[str, dict[str, Any]]) -> None:
    for d in models.values():
        defined = {v["name"] for v in d["templating"]["list"]} | BUILTIN_VARS
        texts = [t["expr"] for _, t in targets(d)]
        texts += [a["target"]["expr"] for a in d["annotations"]["list"]]
        texts += [q for _, q in variable_exprs(d)]
        for text in texts:
            used = set(VAR.findall(text))
            assert used <= defined, (d["uid"], used - defined, text)


def test_data_links_point_at_dashboards(models: dict[str, dict[str, Any]]) -> None:
    uids = {d["uid"] for d in models.values()}
    blob = json.dumps(models)
    linked = set(re.findall(r"/d/([\w-]+)/", blob))
    assert linked and linked <= uids
    assert "${__field.labels.pod}" in blob and "${__value.raw}" in blob


def test_lint_helpers_catch_violations() -> None:
    assert rate_violations('rate(x_total{job=~"$job"}[5m])', False)
    assert rate_violations('increase(x_total{job=~"$job"}[$__range])', False)
    assert not rate_violations('increase(x_total{job=~"$job"}[$__range])', True)
    assert counter_violations('headroom_oom_kills_total{job=~"$job"} > 0')
    assert not counter_violations('resets(headroom_oom_kills_total{job=~"$job"}[1m])')
    assert job_violations("headroom_memory_usage_bytes")
    assert job_violations('headroom_memory_usage_bytes{namespace="a"}')
    assert not job_violations('headroom:memory_headroom:bytes{namespace="a"}')
    assert metric_names('label_replace(up{job="x"}, "a", "$1", "b", "(.*)")') == {"up"}


def test_runbooks_name_existing_dashboards(models: dict[str, dict[str, Any]]) -> None:
    titles = {d["title"] for d in models.values()}
    # Requested from the alerts owner: the vLLM panels live in "headroom / pod memory"
    # (row "vLLM"); there is no separate vLLM dashboard.
    pending: set[str] = set()
    panel_titles = {p["title"] for d in models.values() for p in all_panels(d)}
    for path in sorted((ROOT / "alerts" / "runbooks").glob("*.md")):
        text = path.read_text()
        for name in re.findall(r"\*(headroom / [^*]+)\*", text):
            assert name in titles or name in pending, f"{path.name}: {name}"
        # A panel a runbook names in quotes exists (a word of a title is enough).
        for line in text.splitlines():
            if "panel" in line:
                for quoted in re.findall(r'"([^"]+)"', line):
                    assert any(quoted in t for t in panel_titles), f"{path.name}: {quoted}"


# --- real Prometheus ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus binary not installed")
    tmp = tmp_path_factory.mktemp("prometheus")
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("prometheus did not start")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _query(url: str, expr: str) -> dict[str, Any]:
    q = urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
            body: dict[str, Any] = json.load(r)
            return body
    except urllib.error.HTTPError as e:  # 400: a parse error, with its message
        err: dict[str, Any] = json.load(e)
        return err


@pytest.mark.prometheus
def test_every_query_is_valid_promql(prometheus: str) -> None:
    failures = []
    for uid, title, expr in dashboards.queries():
        body = _query(prometheus, substitute_var(expr))
        if body.get("status") != "success":
            failures.append(f"{uid} / {title}: {body.get('error')}\n  {expr}")
    assert not failures, "\n".join(failures)


@pytest.mark.prometheus
def test_every_variable_query_is_valid_promql(
    prometheus: str, models: dict[str, dict[str, Any]],
) -> None:
    for d in models.values():
        for name, expr in variable_exprs(d):
            body = _query(prometheus, substitute_var(expr))
            assert body.get("status") == "success", (d["uid"], name, body.get("error"))


@pytest.mark.prometheus
def test_prometheus_rejects_a_bad_query(prometheus: str) -> None:
    assert _query(prometheus, "sum by (a (x)")["status"] == "error"
