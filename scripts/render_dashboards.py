#!/usr/bin/env python3
"""Draw each dashboard's first screen (1920x1080) from a real run's data, for the README.

No Grafana runs here: this is a rendering of the dashboards' own queries (the generated
JSON's first-screen panels, their PromQL, legends, units, thresholds, colours, stacking
and annotations) against the Prometheus of a real run, drawn with matplotlib. Every
picture says so in its header.

    sudo python3 scripts/render_dashboards.py            # run the e2e, then draw
    python3 scripts/render_dashboards.py --run docs/dashboards/run.json  # the pictured run

The run comes from ``tests/e2e/test_dashboards_e2e.py`` (``HEADROOM_DASHBOARD_RUN=run.json``):
a pod with two vLLM-titled processes, one leaking anon memory, one appending to an
unmapped /dev/shm file, under a real cgroup v1 limit, until the kernel OOM-kills it. The
tiles (instant panels) are read where the dotted line is, shortly before the kill.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "dashboards"
W_PX, H_PX, DPI = 1920, 1080, 100
HEADER_PX = 70  # Grafana's top bar and variables
UNIT_PX = 38  # one grid unit: 30 px and an 8 px gap
FIRST_SCREEN_UNITS = 24
BG, PANEL_BG, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
# Grafana's named colours and its classic palette.
COLOURS = {
    "red": "#F2495C", "orange": "#FF9830", "yellow": "#FADE2A", "green": "#73BF69",
    "blue": "#5794F2", "super-light-blue": "#C0D8FF", "light-blue": "#8AB8FF",
    "dark-red": "#C4162A", "dark-orange": "#FA6400", "dark-yellow": "#E0B400",
    "purple": "#B877D9", "text": "#CCCCDC",
}
PALETTE = ["#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9",
           "#705DA0", "#37872D", "#FADE2A"]


# --- values as Grafana formats them -----------------------------------------------------
def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "no data"
    if unit in ("bytes", "binBps"):
        suffix = "/s" if unit == "binBps" else ""
        size = abs(value)
        for name, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if size >= scale:
                return f"{value / scale:.3g} {name}{suffix}"
        return f"{value:.3g} B{suffix}"
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit == "s":
        for name, scale in (("day", 86400), ("hour", 3600), ("min", 60)):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value:.3g} s"
    if unit == "reqps":
        return f"{value:.3g} req/s"
    return f"{value:.4g}"


def day(epoch: float) -> float:
    """Unix seconds -> matplotlib's date number (days since 1970-01-01, UTC)."""
    return epoch / 86400


def clock(x: float, _pos: object = None) -> str:
    return datetime.fromtimestamp(x * 86400, tz=timezone.utc).strftime("%H:%M:%S")


def legend(fmt_: str, labels: dict[str, str]) -> str:
    out = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt_)
    return out or "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def colour_of(name: str) -> str:
    return COLOURS.get(name, name)


def threshold_colour(value: float, thresholds: dict[str, Any], maximum: float | None) -> str:
    if thresholds.get("mode") == "percentage":
        if not maximum:
            return TEXT
        value = value / maximum * 100
    out = thresholds["steps"][0]["color"]
    for step in thresholds["steps"][1:]:
        if value >= step["value"]:
            out = step["color"]
    return colour_of(out)


def overrides_for(panel: dict[str, Any], name: str) -> dict[str, Any]:
    """The override properties that apply to a series of this display name."""
    out: dict[str, Any] = {}
    for o in panel["fieldConfig"].get("overrides", []):
        m = o["matcher"]
        hit = (m["id"] == "byName" and m["options"] == name) or (
            m["id"] == "byRegexp" and re.fullmatch(m["options"], name))
        if hit:
            out.update({p["id"]: p["value"] for p in o["properties"]})
    return out


# --- panels ------------------------------------------------------------------------------
def panel_axes(fig: Figure, panel: dict[str, Any]
               ) -> tuple[Axes, tuple[float, float, float, float]]:
    """An axes at the panel's grid position, with its title (a margin inside for it)."""
    gp = panel["gridPos"]
    x0 = gp["x"] / 24 * W_PX + 4
    w = gp["w"] / 24 * W_PX - 8
    top = HEADER_PX + gp["y"] * UNIT_PX
    h = gp["h"] * UNIT_PX - 8
    rect = (x0 / W_PX, 1 - (top + h) / H_PX, w / W_PX, h / H_PX)
    frame = fig.add_axes(rect)
    frame.set_facecolor(PANEL_BG)
    frame.set_xticks([])
    frame.set_yticks([])
    for s in frame.spines.values():
        s.set_color(GRID)
    frame.text(0.01, 0.97, panel["title"], transform=frame.transAxes, va="top", ha="left",
               color=TEXT, fontsize=9, fontweight="bold")
    return frame, rect


def inner(fig: Figure, rect: tuple[float, float, float, float], *, right: float = 0.0,
          bottom: float = 0.0) -> Axes:
    x, y, w, h = rect
    title_h = 26 / H_PX
    pad_l, pad_b = 60 / W_PX, 22 / H_PX + bottom
    ax = fig.add_axes((x + pad_l, y + pad_b, w - pad_l - 12 / W_PX - right,
                       h - pad_b - title_h - 6 / H_PX))
    ax.set_facecolor(PANEL_BG)
    ax.tick_params(colors=TEXT, labelsize=7)
    for s in ax.spines.values():
        s.set_color(GRID)
    ax.grid(color=GRID, linewidth=0.5)
    return ax


def draw_stat(fig: Figure, item: dict[str, Any]) -> None:
    p = item["panel"]
    frame, _ = panel_axes(fig, p)
    defaults = p["fieldConfig"]["defaults"]
    unit = defaults.get("unit", "none")
    first = item["targets"][0].get("at", [])
    if not first:
        frame.text(0.5, 0.42, defaults.get("noValue", "no data"), transform=frame.transAxes,
                   ha="center", va="center", color=TEXT, fontsize=20)
        return
    maximum = None
    if len(item["targets"]) > 1 and item["targets"][1].get("at"):
        maximum = float(item["targets"][1]["at"][0]["value"][1])
    series = first[0]
    value = float(series["value"][1])
    text = fmt(value, unit)
    mappings = defaults.get("mappings") or []
    for m in mappings:
        hit = m.get("options", {}).get(str(int(value))) if value == int(value) else None
        if hit:
            text = hit["text"]
    if p["options"].get("textMode") == "value_and_name":
        text = f"{legend(item['targets'][0]['legend'], series['metric'])}  {text}"
    col = threshold_colour(value, defaults["thresholds"], maximum)
    frame.text(0.5, 0.42, text, transform=frame.transAxes, ha="center", va="center",
               color=col, fontsize=20 if len(text) < 14 else 15, fontweight="bold")


def _stack_order(p: dict[str, Any]) -> bool:
    return bool(p["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get(
        "mode") == "normal")


def draw_timeseries(fig: Figure, item: dict[str, Any], run: dict[str, Any],
                    annotations: list[dict[str, Any]]) -> None:
    p = item["panel"]
    _, rect = panel_axes(fig, p)
    unit = p["fieldConfig"]["defaults"].get("unit", "none")
    lines: list[tuple[str, list[float], list[float], dict[str, Any]]] = []
    for t in item["targets"]:
        for s in t.get("range", []):
            name = legend(t["legend"], s["metric"])
            xs = [float(v[0]) for v in s["values"]]
            ys = [float(v[1]) for v in s["values"]]
            lines.append((name, xs, ys, overrides_for(p, name)))
    right_axis = any(o.get("custom.axisPlacement") == "right" for *_, o in lines)
    legend_w = 0.0
    if p["options"]["legend"]["placement"] == "right":
        legend_w = rect[2] * 0.32
    ax = inner(fig, rect, right=legend_w + (40 / W_PX if right_axis else 0),
               bottom=0.0 if legend_w else min(0.11, 0.018 * (len(lines) + 1)))
    ax2 = ax.twinx() if right_axis else None
    stack = _stack_order(p)
    base: dict[float, float] = {}
    handles = []
    for i, (name, xs, ys, o) in enumerate(lines):
        col = colour_of(o.get("color", {}).get("fixedColor", PALETTE[i % len(PALETTE)]))
        style = o.get("custom.lineStyle", {}).get("fill")
        ls = {"dash": "--", "dot": ":"}.get(style or "", "-")
        lw = float(o.get("custom.lineWidth", 1.2))
        hide = o.get("custom.hideFrom", {})
        when = [day(x) for x in xs]
        target = ax2 if (ax2 is not None and o.get("custom.axisPlacement") == "right") else ax
        label = name
        if hide.get("viz"):
            label = f"{name}: {fmt(ys[-1] if ys else None, unit)} (legend only)"
            handles.append(ax.plot([], [], color=col, label=label)[0])
            continue
        stacked = stack and o.get("custom.stacking", {}).get("mode") != "none"
        if stacked:
            lows = [base.get(x, 0.0) for x in xs]
            highs = [lo + y for lo, y in zip(lows, ys, strict=True)]
            for x, hi in zip(xs, highs, strict=True):
                base[x] = hi
            fill = float(o.get("custom.fillOpacity", 25)) / 100 * 2
            target.fill_between(when, lows, highs, color=col, alpha=min(0.9, fill),
                                linewidth=0, step=None)
            h = target.plot(when, highs, color=col, linewidth=lw, linestyle=ls, label=label)
        else:
            h = target.plot(when, ys, color=col, linewidth=lw, linestyle=ls, label=label)
        handles.append(h[0])
    # Annotations: a region while a series has samples (a firing alert), a line where
    # it starts (an OOM kill); kills drawn last, on top.
    for a in sorted(annotations, key=lambda a: a["name"] == "OOM kill"):
        for s in a["range"]:
            times = [float(v[0]) for v in s["values"]]
            for x0, x1 in _runs(times):
                t0 = day(x0)
                col = colour_of(a["colour"])
                if a["name"] == "OOM kill":
                    ax.axvline(t0, color=col, linewidth=1.5, linestyle="--")
                    ax.text(t0, 0.98, " OOM kill", transform=ax.get_xaxis_transform(),
                            color=col, fontsize=7, va="top")
                else:
                    ax.axvspan(t0, day(x1), color=col, alpha=0.10, linewidth=0)
    ax.axvline(day(run["at"]), color=TEXT, linewidth=0.8, linestyle=":")
    ax.xaxis.set_major_formatter(FuncFormatter(clock))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v, unit)))
    if p["fieldConfig"]["defaults"].get("min") == 0:
        ax.set_ylim(bottom=0)
    if ax2 is not None:
        ax2.tick_params(colors=TEXT, labelsize=7)
        ax2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v, "percentunit")))
        ax2.set_ylim(0, 1)
    if handles:
        if legend_w:
            leg = ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                            fontsize=7, frameon=False, labelcolor=TEXT)
        else:
            leg = ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, -0.1),
                            ncol=3, fontsize=7, frameon=False, labelcolor=TEXT)
        leg.set_in_layout(False)
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, color=TEXT, ha="center")


def _runs(times: list[float]) -> list[tuple[float, float]]:
    """(start, end) of each run of consecutive samples: Grafana draws one annotation
    per run (a region when it lasts)."""
    out: list[tuple[float, float]] = []
    for t in times:
        if out and t - out[-1][1] <= 1.5:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def draw_table(fig: Figure, item: dict[str, Any]) -> None:
    p = item["panel"]
    frame, _ = panel_axes(fig, p)
    organize = next(t for t in p["transformations"] if t["id"] == "organize")["options"]
    columns = list(organize["renameByName"].values())
    units = {o["matcher"]["options"]: o["properties"][0]["value"]
             for o in p["fieldConfig"]["overrides"] if o["properties"][0]["id"] == "unit"}
    labels = [k for k in organize["indexByName"] if k not in columns]
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    for col, t in zip(columns, item["targets"], strict=True):
        for s in t.get("at", []):
            key = tuple(s["metric"].get(x, "") for x in labels)
            rows.setdefault(key, {})[col] = fmt(float(s["value"][1]), units.get(col, "none"))
    header = [*labels, *columns]
    cells = [[*k, *(r.get(c, "") for c in columns)] for k, r in sorted(rows.items())]
    y = 0.86
    xs = [0.01 + i * 0.98 / len(header) for i in range(len(header))]
    for x, h in zip(xs, header, strict=True):
        frame.text(x, y, h, transform=frame.transAxes, color=COLOURS["light-blue"],
                   fontsize=7, fontweight="bold")
    for row_ in cells[:12] or [["no data"]]:
        y -= 0.07
        for x, cell in zip(xs, row_, strict=False):
            frame.text(x, y, cell[:38], transform=frame.transAxes, color=TEXT, fontsize=7)


def draw_bargauge(fig: Figure, item: dict[str, Any]) -> None:
    p = item["panel"]
    frame, rect = panel_axes(fig, p)
    defaults = p["fieldConfig"]["defaults"]
    unit = defaults.get("unit", "none")
    bars = [(legend(t["legend"], s["metric"]), float(s["value"][1]))
            for t in item["targets"] for s in t.get("at", [])]
    if not bars:
        frame.text(0.5, 0.45, "no data", transform=frame.transAxes, ha="center", color=TEXT)
        return
    ax = inner(fig, rect)
    pos = ax.get_position()  # room on the left for the names
    ax.set_position((pos.x0 + 0.08, pos.y0, pos.width - 0.08, pos.height))
    names = [n if len(n) <= 28 else "..." + n[-25:] for n, _ in bars]
    values = [v for _, v in bars]
    cols = [threshold_colour(v, defaults["thresholds"], None) for v in values]
    ax.barh(range(len(values)), values, color=cols)
    ax.set_yticks(range(len(values)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1 if unit == "percentunit" else max(values) * 1.15)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v, unit)))
    for i, v in enumerate(values):
        ax.text(v, i, " " + fmt(v, unit), va="center", color=TEXT, fontsize=7)


def render(run: dict[str, Any], name: str, out: Path) -> Path:
    dash = run["dashboards"][name]
    fig = plt.figure(figsize=(W_PX / DPI, H_PX / DPI), dpi=DPI, facecolor=BG)
    when = datetime.fromtimestamp(run["at"], tz=timezone.utc).strftime("%H:%M:%S")
    fig.text(0.005, 1 - 14 / H_PX, f"{dash['model']['title']}", color=TEXT, fontsize=13,
             fontweight="bold", va="top")
    fig.text(0.005, 1 - 40 / H_PX,
             "A rendering of this dashboard's first-screen queries against a real run's "
             "Prometheus (matplotlib, NOT a Grafana screenshot). Real kernel (cgroup v1), "
             "real exporter; windows scaled 360x. Tiles read at the dotted line "
             f"({when} UTC, {run['killed'] - run['at']:.0f} s before the OOM kill); dashed "
             "red: OOM kill; orange band: a headroom alert firing.",
             color="#8e8e8e", fontsize=8, va="top")
    pod_annotations = [a for a in dash["annotations"] if a["name"] != "Container restart "
                       "(counters reset)"]
    for item in dash["panels"]:
        kind = item["panel"]["type"]
        if kind == "stat":
            draw_stat(fig, item)
        elif kind == "timeseries":
            draw_timeseries(fig, item, run, pod_annotations)
        elif kind == "table":
            draw_table(fig, item)
        elif kind == "bargauge":
            draw_bargauge(fig, item)
    for r in dash.get("rows", []):
        y = HEADER_PX + r["y"] * UNIT_PX
        if y + UNIT_PX <= H_PX:
            mark = ">" if r["collapsed"] else "v"
            fig.text(6 / W_PX, 1 - (y + 20) / H_PX, f"{mark} {r['title']}", color=TEXT,
                     fontsize=10, fontweight="bold")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=DPI, facecolor=BG)
    plt.close(fig)
    return path


def record_run(path: Path) -> None:
    """Run the e2e that records the run (needs root, a v1 memory cgroup, prometheus)."""
    env = {**os.environ, "HEADROOM_DASHBOARD_RUN": str(path), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                    "tests/e2e/test_dashboards_e2e.py"], cwd=ROOT, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, help="a saved run (else record one now)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    run_path = args.run
    if run_path is None:
        run_path = Path(tempfile.mkdtemp()) / "run.json"
        record_run(run_path)
    run = json.loads(run_path.read_text())
    for name in sorted(run["dashboards"]):
        print(render(run, name, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
