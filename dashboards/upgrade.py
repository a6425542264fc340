"""The upgrade of grafanalib's dashboard JSON to Grafana's current dashboard model.

grafanalib 0.7.1 emits a Grafana 6/7 era model; ``upgrade`` brings it to the current one
(schemaVersion 41, the model of grafana-foundation-sdk 11.6, which the tests parse it
with): ``{type, uid}`` datasources, no null or legacy keys (no ``definition`` on
variables, no ``links``/``transformations`` on rows, ``cellOptions`` instead of
``displayMode`` in tables, ...), and every field the model requires written out, legends
shown (the SDK would default ``showLegend`` to false).

Plain JSON in, plain JSON out: this module needs no grafanalib.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Json = dict[str, Any]

# The model of Grafana 11.6 (grafana-foundation-sdk 11.6's default), which the tests parse.
SCHEMA_VERSION = 41

# Keys of the current model, per level; anything else grafanalib writes is legacy.
DASHBOARD_KEYS = {
    "annotations", "description", "editable", "fiscalYearStartMonth", "graphTooltip",
    "links", "panels", "refresh", "schemaVersion", "tags", "templating", "time",
    "timepicker", "timezone", "title", "uid", "version", "weekStart",
}
PANEL_KEYS = {
    "datasource", "description", "fieldConfig", "gridPos", "id", "interval", "links",
    "maxDataPoints", "maxPerRow", "options", "repeat", "repeatDirection", "targets",
    "timeFrom", "timeShift", "title", "transformations", "transparent", "type",
}
ROW_KEYS = {"collapsed", "gridPos", "id", "panels", "repeat", "title", "type"}
TARGET_KEYS = {
    "datasource", "editorMode", "expr", "format", "hide", "instant", "interval",
    "legendFormat", "range", "refId",
}
VARIABLE_KEYS = {
    "allowCustomValue", "allValue", "current", "datasource", "hide", "includeAll", "label",
    "multi", "name", "options", "query", "refresh", "regex", "skipUrlSync", "sort", "type",
}
LINK_KEYS = {
    "asDropdown", "icon", "includeVars", "keepTime", "tags", "targetBlank", "title",
    "tooltip", "type", "url",
}
# The time picker's refresh choices (the model writes them out).
REFRESH_INTERVALS = ["30s", "1m", "5m", "15m", "30m", "1h", "2h", "1d"]


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


# --- panel options, per type: the model's required fields, written out ------------------
def _legend(options: Json) -> Json:
    legend = dict(options.get("legend") or {})
    return {
        "calcs": legend.get("calcs", []),
        "displayMode": legend.get("displayMode", "list"),
        "placement": legend.get("placement", "bottom"),
        "showLegend": True,  # the SDK's default is false: legends are always shown here
    }


def _timeseries_options(options: Json) -> Json:
    tooltip = options.get("tooltip") or {}
    return {
        "legend": _legend(options),
        "tooltip": {"mode": tooltip.get("mode", "multi"), "sort": tooltip.get("sort", "desc")},
    }


def _stat_options(options: Json) -> Json:
    return {
        "colorMode": options.get("colorMode", "value"),
        "graphMode": options.get("graphMode", "none"),
        "justifyMode": options.get("justifyMode", "auto"),
        "orientation": options.get("orientation", "auto"),
        "percentChangeColorMode": "standard",
        "reduceOptions": options["reduceOptions"],
        "showPercentChange": False,
        "textMode": options.get("textMode", "auto"),
        "wideLayout": True,
    }


def _table_options(options: Json) -> Json:
    return {
        "cellHeight": "sm",
        "frameIndex": 0,
        "showHeader": options.get("showHeader", True),
        "showTypeIcons": False,
        "sortBy": options.get("sortBy", []),
    }


def _bargauge_options(options: Json) -> Json:
    keep = ("displayMode", "maxVizHeight", "minVizHeight", "minVizWidth", "namePlacement",
            "orientation", "reduceOptions", "showUnfilled", "sizing", "valueMode")
    out = {k: options[k] for k in keep if k in options}
    out["legend"] = {"calcs": [], "displayMode": "list", "placement": "bottom",
                     "showLegend": False}  # a bar list names its bars: no legend to show
    return out


def _table_field_config(fc: Json) -> Json:
    custom = dict(fc["defaults"].get("custom") or {})
    custom.pop("displayMode", None)  # legacy: cellOptions.type says how a cell draws
    custom.setdefault("align", "auto")
    custom["cellOptions"] = {"type": "auto"}
    custom.setdefault("inspect", False)
    fc["defaults"]["custom"] = custom
    return fc


OPTIONS: dict[str, Callable[[Json], Json]] = {
    "timeseries": _timeseries_options,
    "stat": _stat_options,
    "table": _table_options,
    "bargauge": _bargauge_options,
}


def _target(t: Json) -> Json:
    t = {k: v for k, v in t.items() if k in TARGET_KEYS}
    t["editorMode"] = "code"
    t["range"] = not t.get("instant", False)
    t["instant"] = bool(t.get("instant", False))
    for key in ("interval", "hide"):
        if not t.get(key):
            t.pop(key, None)
    return t


def _data_link(link: Json) -> Json:
    return {"targetBlank": bool(link.get("targetBlank", False)), "title": link["title"],
            "url": link["url"]}


def _field_config(p: Json) -> Json:
    fc: Json = p.get("fieldConfig") or {"defaults": {}, "overrides": []}
    fc.setdefault("overrides", [])
    defaults = fc["defaults"]
    defaults["links"] = [_data_link(x) for x in defaults.get("links", [])]
    for o in fc["overrides"]:
        for prop in o["properties"]:
            if prop["id"] == "links":
                prop["value"] = [_data_link(x) for x in prop["value"]]
    if p["type"] == "table":
        fc = _table_field_config(fc)
    return fc


def _row(p: Json) -> Json:
    row = {k: v for k, v in p.items() if k in ROW_KEYS}
    row["collapsed"] = bool(row.get("collapsed", False))
    row["panels"] = [_panel(x) for x in p.get("panels", [])]
    if not row.get("repeat"):
        row.pop("repeat", None)
    return row


def _panel(p: Json) -> Json:
    if p.get("type") == "row":
        return _row(p)
    p = {k: v for k, v in p.items() if k in PANEL_KEYS}
    if p.get("maxDataPoints") == 100:  # grafanalib's default: let Grafana choose
        del p["maxDataPoints"]
    p["transparent"] = bool(p.get("transparent", False))
    if not p.get("repeat"):
        for key in ("repeat", "maxPerRow"):
            p.pop(key, None)
    p["repeatDirection"] = "h"
    p["links"] = [_link(x) for x in p.get("links", [])]
    p["options"] = OPTIONS[p["type"]](p.get("options") or {})
    p["fieldConfig"] = _field_config(p)
    p["targets"] = [_target(t) for t in p.get("targets", [])]
    if not p.get("transformations"):
        p.pop("transformations", None)
    return p


def _current(v: Json) -> Json | None:
    """The selected value; None (no key) lets Grafana pick: the default data source, or
    the first option of a query (the pod variable lists vLLM pods first)."""
    current = v.get("current") or {}
    value = current.get("value")
    if v["type"] == "datasource" or value is None:
        return None
    if value == "$__all":
        return {"selected": True, "text": ["All"], "value": ["$__all"]}
    if v.get("multi"):
        return {"selected": True, "text": [value], "value": [value]}
    return {"selected": True, "text": value, "value": value}


def _variable(v: Json) -> Json:
    v = {k: val for k, val in v.items() if k in VARIABLE_KEYS}
    current = _current(v)
    if current is None:
        v.pop("current", None)
    else:
        v["current"] = current
    v["allowCustomValue"] = True
    v.setdefault("regex", "")
    if v["type"] != "custom":  # custom variables keep their fixed options
        v["options"] = []
    v["skipUrlSync"] = False
    v["multi"] = bool(v.get("multi", False))
    v["includeAll"] = bool(v.get("includeAll", False))
    return v


def _link(link: Json) -> Json:
    out = {k: v for k, v in link.items() if k in LINK_KEYS}
    out.setdefault("tags", [])
    return out


def upgrade(raw: Json) -> Json:
    """grafanalib's JSON -> Grafana's current dashboard model."""
    d: Json = _prune({k: v for k, v in raw.items() if k in DASHBOARD_KEYS})
    d["schemaVersion"] = SCHEMA_VERSION
    d["version"] = 1
    d["fiscalYearStartMonth"] = 0
    d["panels"] = [_panel(p) for p in d["panels"]]
    d["templating"] = {"list": [_variable(v) for v in d["templating"]["list"]]}
    d["links"] = [_link(x) for x in d.get("links", [])]
    d["annotations"] = {"list": [{**a, "builtIn": 0} for a in d["annotations"]["list"]]}
    d["timepicker"] = {"hidden": False, "refresh_intervals": REFRESH_INTERVALS}
    return d


