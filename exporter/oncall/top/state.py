"""What the screen shows: the source, the sort and filter, the selection, and the
latest rows, forecasts, kills and processes."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.oncall import forecast as fc
from exporter.oncall.top.history import Histories
from exporter.oncall.top.local import Key, Proc
from exporter.oncall.top.rows import KillMark, Row


@dataclass
class State:
    url: str
    source: str = fc.LOCAL  # local (the rules' mirror over top's reads) / recorded
    sort: str = "t"
    filt: str = ""
    typing: str | None = None  # the filter being typed
    selected: int = 0
    detail: Key | None = None  # the pod whose cgroups and processes are shown
    error: str = ""
    hist: Histories = field(default_factory=Histories)
    rows: list[Row] = field(default_factory=list)
    cgroups: dict[Key, list[fc.Forecast]] = field(default_factory=dict)
    kills: dict[Key, KillMark] = field(default_factory=dict)
    # The process view: each pod's processes, and (cluster mode) their recorded growth
    # per (namespace, pod, container, process).
    procs: dict[Key, tuple[Proc, ...]] = field(default_factory=dict)
    proc_growth: dict[tuple[str, str, str, str], float] = field(default_factory=dict)
    updated: float = 0.0
    reads: int = 0
    forecast_at: float | None = None  # when the local forecast was last computed
    note: str = ""  # e.g. the windows' scale

