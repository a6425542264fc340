"""Render ``dashboards/*.dashboard.py`` to the committed JSON (``headroom generate``).

``artifacts()`` returns ``{"dashboards/<name>.json": text}``; ``exporter.generate`` also
copies every file into ``charts/headroom/files/dashboards/``. ``python -m
dashboards.generate [--check]`` writes (or verifies) both without the rest of the repo.

grafanalib 0.7.1 emits a Grafana 6/7 era model; ``normalise`` turns it into the current
classic JSON model: schemaVersion 39, ``{type, uid}`` datasources, no null or legacy
keys, the query fields Grafana 10+ writes. Output is sorted, 2-space indented and ends
with a newline, so two runs give identical bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from grafanalib._gen import DashboardEncoder

from dashboards import common

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUFFIX = ".dashboard.py"
CHART_DIR = "charts/headroom/files/dashboards"

# Keys of the current model, per level; anything else grafanalib writes is legacy.
DASHBOARD_KEYS = {
    "annotations", "description", "editable", "fiscalYearStartMonth", "graphTooltip",
    "links", "panels", "refresh", "schemaVersion", "tags", "templating", "time",
    "timepicker", "timezone", "title", "uid", "version", "weekStart",
}
PANEL_KEYS = {
    "collapsed", "datasource", "description", "fieldConfig", "gridPos", "id", "interval",
    "links", "maxDataPoints", "maxPerRow", "options", "panels", "repeat",
    "repeatDirection", "targets", "timeFrom", "timeShift", "title", "transformations",
    "transparent", "type",
}
TARGET_KEYS = {
    "datasource", "editorMode", "expr", "format", "hide", "instant", "interval",
    "legendFormat", "range", "refId",
}
VARIABLE_KEYS = {
    "allValue", "current", "datasource", "definition", "hide", "includeAll", "label",
    "multi", "name", "options", "query", "refresh", "regex", "skipUrlSync", "sort", "type",
}


def sources() -> list[Path]:
    return sorted(HERE.glob("*" + SUFFIX))


def load(path: Path) -> Any:
    """The ``dashboard`` object a ``*.dashboard.py`` file defines."""
    name = path.name[: -len(SUFFIX)]
    spec = importlib.util.spec_from_file_location(f"dashboards._{name.replace('-', '_')}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dashboard


def _prune(obj: Any) -> Any:
    """Drops null values (Grafana's defaults), except in threshold steps where a null
    value is the base step (from -infinity)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "steps" and isinstance(v, list):
                out[k] = v
            elif v is not None:
                out[k] = _prune(v)
        return out
    if isinstance(obj, list):
        return [_prune(v) for v in obj]
    return obj


def _panel(p: dict[str, Any]) -> dict[str, Any]:
    p = {k: v for k, v in p.items() if k in PANEL_KEYS}
    if p.get("maxDataPoints") == 100:  # grafanalib's default: let Grafana choose
        del p["maxDataPoints"]
    if not p.get("transparent"):
        p.pop("transparent", None)
    if p.get("type") == "row":
        p.pop("datasource", None)
        p.pop("targets", None)
        p.pop("fieldConfig", None)
        p["panels"] = [_panel(x) for x in p.get("panels", [])]
        return p
    if p.get("type") == "bargauge":
        p["options"].pop("fieldOptions", None)
        for key in ("showThresholdLabels", "showThresholdMarkers"):
            p["options"].pop(key, None)
    if not p.get("repeat"):
        for key in ("repeat", "repeatDirection", "maxPerRow"):
            p.pop(key, None)
    targets = []
    for t in p.get("targets", []):
        t = {k: v for k, v in t.items() if k in TARGET_KEYS}
        t["editorMode"] = "code"
        t["range"] = not t.get("instant", False)
        if not t["instant"]:
            del t["instant"]
        if not t.get("interval"):
            t.pop("interval", None)
        if not t.get("hide"):
            t.pop("hide", None)
        targets.append(t)
    p["targets"] = targets
    return p


def _variable(v: dict[str, Any]) -> dict[str, Any]:
    v = {k: val for k, val in v.items() if k in VARIABLE_KEYS}
    if v["type"] == "query":
        # A plain string query: every Grafana version reads it (10+ shows it as code).
        v["definition"] = v["query"]
    current = v.get("current") or {}
    if current.get("value") == "$__all":
        v["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    elif current.get("value") is not None and v.get("multi"):
        val = current["value"]
        v["current"] = {"selected": True, "text": [val], "value": [val]}
    elif current.get("value") is not None:
        v["current"] = {"selected": True, "text": current["value"], "value": current["value"]}
    else:
        v["current"] = {}
    if v["type"] == "datasource":
        v["current"] = {}
    if not v.get("regex"):
        v["regex"] = ""
    if v["type"] != "custom":  # custom variables keep their fixed options
        v["options"] = []
    v["skipUrlSync"] = False
    return v


def normalise(raw: dict[str, Any]) -> dict[str, Any]:
    """grafanalib's JSON -> Grafana's current classic dashboard model."""
    d: dict[str, Any] = _prune({k: v for k, v in raw.items() if k in DASHBOARD_KEYS})
    d["schemaVersion"] = common.SCHEMA_VERSION
    d["version"] = 1
    d["fiscalYearStartMonth"] = 0
    d["panels"] = [_panel(p) for p in d["panels"]]
    d["templating"] = {"list": [_variable(v) for v in d["templating"]["list"]]}
    d["timepicker"] = {}
    return d


def to_json(dashboard: Any) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    return normalise(raw)


def render(d: dict[str, Any]) -> str:
    return json.dumps(d, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def dashboards() -> dict[str, dict[str, Any]]:
    """Source stem (also the JSON file's name) -> normalised dashboard model."""
    return {p.name[: -len(SUFFIX)]: to_json(load(p)) for p in sources()}


def artifacts() -> dict[str, str]:
    """Repository-relative path -> content (``exporter.generate`` adds the chart copies)."""
    return {f"dashboards/{name}.json": render(d) for name, d in dashboards().items()}


def _with_chart_copies(files: dict[str, str]) -> dict[str, str]:
    out = dict(files)
    for rel, content in files.items():
        out[f"{CHART_DIR}/{Path(rel).name}"] = content
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__)
    ap.add_argument("--check", action="store_true",
                    help="fail if a generated file is missing, stale or unexpected")
    args = ap.parse_args(argv)
    files = _with_chart_copies(artifacts())
    problems = []
    for rel, content in sorted(files.items()):
        path = ROOT / rel
        if path.exists() and path.read_text() == content:
            continue
        if args.check:
            problems.append(f"stale or missing: {rel}")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            print(f"wrote {rel}")
    # A JSON file no source produces (a renamed dashboard, the old placeholder) would
    # ship in the chart: report it rather than delete what someone else may own.
    for folder in (HERE, ROOT / CHART_DIR):
        for path in sorted(folder.glob("*.json")):
            rel = str(path.relative_to(ROOT))
            if rel not in files:
                problems.append(f"not generated by any *.dashboard.py: {rel}")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        if args.check:
            print("run `python -m dashboards.generate` (or `headroom generate`)",
                  file=sys.stderr)
        return 1
    if args.check:
        print(f"{len(files)} dashboard files are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
