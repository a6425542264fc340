"""The look every panel shares: colours fixed by memory kind, line styles, threshold
steps and field overrides (plain Grafana JSON: no grafanalib needed).

What the kernel cannot reclaim is warm, page cache is cool, so a kind looks the same on
every panel and every cgroup version; limits and sizes are red dashed lines that never
stack or fill.
"""

from __future__ import annotations

from typing import Any

from exporter import catalog as c

Json = dict[str, Any]

# Colours by memory kind, in the catalogue's stacking order (least reclaimable first).
KIND_COLOURS: dict[str, str] = dict(zip(c.MEMORY_KINDS, (
    "red",  # anon
    "orange",  # shmem
    "yellow",  # kernel
    "dark-yellow",  # sock
    "dark-orange",  # unaccounted
    "blue",  # file_active
    "super-light-blue",  # file_inactive
), strict=True))
HIDDEN_COLOUR = "dark-red"  # memory no process owns
PAGE_CACHE_COLOUR = "blue"
LIMIT_COLOUR = "red"

DASHED = {"dash": [10, 10], "fill": "dash"}
DOTTED = {"dash": [2, 4], "fill": "dot"}
NOT_STACKED = {"group": "A", "mode": "none"}


def thresholds(*steps: tuple[str, float]) -> list[Json]:
    """A base colour (value null: from -inf) followed by (colour, from value) steps."""
    base, *rest = steps
    return [{"color": base[0], "value": None}] + [
        {"color": col, "value": v} for col, v in rest
    ]


NO_THRESHOLDS = thresholds(("green", 0))
OOM_STEPS = thresholds(("green", 0), ("red", 1))


def props(**kw: Any) -> list[Json]:
    return [{"id": k.replace("__", "."), "value": v} for k, v in kw.items()]


def override(name: str, **kw: Any) -> Json:
    """A field override by display name (e.g. ``custom__lineStyle``)."""
    return {"matcher": {"id": "byName", "options": name}, "properties": props(**kw)}


def override_regex(pattern: str, **kw: Any) -> Json:
    """A field override for every series whose display name matches ``pattern``."""
    return {"matcher": {"id": "byRegexp", "options": pattern}, "properties": props(**kw)}


def fixed(colour: str) -> dict[str, str]:
    return {"fixedColor": colour, "mode": "fixed"}


def limit_style(pattern: str) -> Json:
    """Limits and sizes: red dashed lines that never stack or fill."""
    return override_regex(
        pattern, custom__lineStyle=DASHED, custom__stacking=NOT_STACKED,
        custom__fillOpacity=0, color=fixed(LIMIT_COLOUR),
    )


def kind_colours(suffix: str = "") -> list[Json]:
    """Overrides that colour each kind (a series named ``<kind><suffix>``) by name."""
    return [override(f"{kind}{suffix}", color=fixed(col)) for kind, col in KIND_COLOURS.items()]


def legend_only(pattern: str) -> Json:
    """A series shown in the legend (its last value) but not drawn, e.g. a mount's size,
    so a node-sized figure does not flatten the axis."""
    return override_regex(
        pattern, custom__hideFrom={"legend": False, "tooltip": True, "viz": True},
    )
