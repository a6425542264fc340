"""Render ``dashboards/*.dashboard.py`` to the committed JSON, for ``headroom generate``.

Each source defines ``dashboard(config)``: the grafanalib dashboard a deployment with
that rules' config gets. ``dashboards(config)`` draws every source for one config, turns
grafanalib's objects into plain JSON and upgrades that to Grafana's current model
(``dashboards.upgrade``). ``artifacts()`` returns ``{"dashboards/<name>.json": text}``
for the shipped config; ``exporter.artifacts.generate`` writes them and copies them into the chart.
Output is sorted, 2-space indented and ends with a newline, so two runs give identical
bytes.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from dashboards.names import CONFIG, Config
from dashboards.upgrade import Json, upgrade

HERE = Path(__file__).resolve().parent
SUFFIX = ".dashboard.py"


def sources() -> list[Path]:
    return sorted(HERE.glob("*" + SUFFIX))


@functools.cache
def _module(path: Path) -> ModuleType:
    """A ``*.dashboard.py`` file, executed once (its name is not an importable one)."""
    name = path.name[: -len(SUFFIX)]
    spec = importlib.util.spec_from_file_location(f"dashboards._{name.replace('-', '_')}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(path: Path) -> Callable[[Config], Any]:
    """The ``dashboard(config)`` function a ``*.dashboard.py`` file defines."""
    draw: Callable[[Config], Any] = _module(path).dashboard
    return draw


def _json_data(obj: Any) -> Any:
    """What ``json.dumps`` writes for a grafanalib object: its ``to_json_data()``."""
    to_json_data = getattr(obj, "to_json_data", None)
    if to_json_data is None:
        raise TypeError(f"{type(obj).__name__} is not JSON serialisable")
    return to_json_data()


def to_json(dashboard: Any) -> Json:
    """A grafanalib dashboard in Grafana's current model."""
    raw: Json = json.loads(json.dumps(dashboard, default=_json_data))
    return upgrade(raw)


def render(d: Json) -> str:
    return json.dumps(d, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def dashboards(config: Config | None = None) -> dict[str, Json]:
    """Source stem (also the JSON file's name) -> dashboard model; with ``config``, the
    dashboards a deployment with those rules would get (a live test with every window
    scaled down draws them with the same scaled windows and thresholds)."""
    drawn_for = CONFIG if config is None else config
    return {p.name[: -len(SUFFIX)]: to_json(load(p)(drawn_for)) for p in sources()}


def artifacts() -> dict[str, str]:
    """Repository-relative path -> content (``headroom generate`` adds the chart copies)."""
    return {f"dashboards/{name}.json": render(d) for name, d in dashboards().items()}
