"""``headroom top``: a live terminal view of pods: how close, when, what grows.

Two sources, one answer. With ``--prometheus URL`` (cluster mode: every node's pods, like
``kubectl top``) each row is the forecast contract's recorded series. Without it, top
reads the local exporter's /metrics every second and computes the same definition itself
(``exporter/oncall/forecast.py``, the mirror of the rules) over its own reads; the header
says which source it used.

Each row is a pod on its *binding* cgroup (the tightest of the pod-level cgroup and its
containers; the CGROUP column says which), with unreclaimable / limit, the growth at the
horizon that binds, the time to limit, the top grower, /dev/shm used and orphaned, vLLM
KV usage, and the last OOM kill's age (its /debug/oom/ link under the table). Columns
are dropped by priority on a narrow terminal; names are cut in the middle (the end of a
pod name tells its replicas apart). Keys: ``t u g s n`` sort (time to limit, fullness,
growth, /dev/shm, name), ``/`` filters (Enter applies, Esc clears), arrows or ``j k``
move, Enter opens a pod (its cgroups and processes with growth and limit), Esc goes
back, ``q`` quits. Keyboard only, so it works over SSH.

The model (parse, forecasts, rows, the lines to draw) is pure; only ``run`` touches the
terminal (curses, which restores it on exit or error) and the network.
"""

from __future__ import annotations

import argparse
import contextlib
import curses
import json
import math
import os
import queue
import signal
import sys
import threading
import time
import unicodedata
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from exporter import catalog as c
from exporter.oncall import forecast as fc
from exporter.oncall.diagnose import fmt_duration, fmt_rate, printable
from exporter.oncall.prom_client import Sample, url_problem
from exporter.promql import CONFIG

SORTS = {"t": "time to limit", "u": "used/limit", "g": "growth", "s": "/dev/shm",
         "n": "name"}
MAX_BODY = 64 << 20  # a node's exposition is a few MB; a Prometheus answer is capped too
MAX_POINTS = 6000  # reads kept per series (about 6.7 h at the default windows)
KILL_SHOWN_S = 3600.0  # a killed pod whose cgroups are gone stays on screen this long
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PiB = 1 << 50
Key = tuple[str, str]
W = tuple[str, str, str]


# --- numbers and widths that survive hostile values (NaN, Inf, 1e300, CJK names) --------------
def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def human_bytes(n: float | None) -> str:
    if n is None or math.isnan(n):
        return "n/a"
    if abs(n) >= 1000 * PiB:
        return ">999 PiB" if n > 0 else "<-999 PiB"
    sign = "-" if n < 0 else ""
    a = abs(n)
    for unit, size in (("PiB", PiB), ("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB),
                       ("KiB", KiB)):
        if a >= size:
            return f"{sign}{a / size:.1f} {unit}"
    return f"{sign}{a:.0f} B"


def human_rate(r: float | None) -> str:
    if r is None or math.isnan(r):
        return "n/a"
    if abs(r) >= 1000 * PiB:
        return ">999 PiB/s"
    return fmt_rate(r)


def human_duration(s: float | None) -> str:
    if s is None or math.isnan(s) or s < 0:
        return "-"
    if s > 999 * 86400:
        return ">999 days"
    return fmt_duration(s)


def char_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width_of(text: str) -> int:
    return sum(char_width(ch) for ch in text)


def cut(text: str, width: int) -> str:
    """The longest prefix that fits ``width`` columns."""
    out, used = [], 0
    for ch in text:
        w = char_width(ch)
        if used + w > width:
            break
        out.append(ch)
        used += w
    return "".join(out)


def cut_middle(text: str, width: int) -> str:
    """Fit ``width`` columns keeping both ends: "llm/vllm-7f9…-x2kq9"."""
    if width_of(text) <= width:
        return text
    if width <= 1:
        return cut(text, width)
    tail_w = (width - 1) * 2 // 3
    head = cut(text, width - 1 - tail_w)
    tail, used = [], 0
    for ch in reversed(text):
        w = char_width(ch)
        if used + w > tail_w:
            break
        tail.append(ch)
        used += w
    return head + "\u2026" + "".join(reversed(tail))


def pad(text: str, width: int, right: bool = False) -> str:
    text = cut(text, width)
    gap = " " * (width - width_of(text))
    return gap + text if right else text + gap


# --- one read of the exporter -----------------------------------------------------------------
@dataclass(frozen=True)
class Proc:
    container: str
    process: str
    anon: float = 0.0
    shmem: float = 0.0
    file: float = 0.0
    count: int = 0

    @property
    def held(self) -> float:
        return self.anon + self.shmem


@dataclass(frozen=True)
class Cgroup:
    container: str  # "" = the pod-level cgroup
    limit: float | None = None
    unreclaimable: float | None = None
    usage: float | None = None
    kinds: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Pod:
    namespace: str
    pod: str
    cgroups: tuple[Cgroup, ...] = ()
    shm: float | None = None
    orphaned: float | None = None
    kv_usage: float | None = None
    processes: tuple[Proc, ...] = ()
    kills: float = 0.0
    exporter: str = ""  # where its /debug/oom/ is

    @property
    def key(self) -> Key:
        return self.namespace, self.pod


def parse(text: str, exporter: str = "") -> dict[Key, Pod]:
    """An exposition -> pods with all their cgroups (the binding one is chosen later)."""
    cg: dict[W, dict[str, float]] = {}
    kinds: dict[W, dict[str, float]] = {}
    procs: dict[tuple[str, str, str, str], dict[str, float]] = {}
    shm: dict[Key, float] = {}
    orphaned: dict[Key, float] = {}
    kv: dict[Key, float] = {}
    kills: dict[Key, float] = {}
    wanted = {c.MEMORY_LIMIT_BYTES.name: "limit",
              c.MEMORY_UNRECLAIMABLE_BYTES.name: "unreclaimable",
              c.MEMORY_USAGE_BYTES.name: "usage"}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            lb = {k: printable(v) for k, v in s.labels.items()}  # hostile names
            w = (lb.get("namespace", ""), lb.get("pod", ""), lb.get("container", ""))
            pk = w[:2]
            v = float(s.value)
            if s.name in wanted:
                cg.setdefault(w, {})[wanted[s.name]] = v
            elif s.name == c.MEMORY_BYTES.name:
                kinds.setdefault(w, {})[lb.get("kind", "")] = v
            elif s.name == c.PROCESS_MEMORY_BYTES.name:
                procs.setdefault((*w, lb.get("process", "")), {})[lb.get("kind", "")] = v
            elif s.name == c.PROCESS_COUNT.name:
                procs.setdefault((*w, lb.get("process", "")), {})["count"] = v
            elif s.name == c.TMPFS_USED_BYTES.name and lb.get("mount") == "/dev/shm":
                shm[pk] = shm.get(pk, 0.0) + v
            elif s.name == c.TMPFS_ORPHANED_BYTES.name:
                orphaned[pk] = orphaned.get(pk, 0.0) + v
            elif s.name == c.VLLM_KV_CACHE_USAGE_RATIO.name and lb.get("medium") == "gpu":
                kv[pk] = max(kv.get(pk, 0.0), v)
            elif s.name == c.OOM_KILLS_TOTAL.name and w[2] == "":
                # Pod-level series (one per victim name); a container's copy would count
                # the same kill twice.
                kills[pk] = kills.get(pk, 0.0) + v
    pods: dict[Key, Pod] = {}
    for (ns, pod, container), f in sorted(cg.items()):
        p = pods.get((ns, pod)) or Pod(ns, pod, shm=shm.get((ns, pod)),
                                        orphaned=orphaned.get((ns, pod)),
                                        kv_usage=kv.get((ns, pod)),
                                        kills=kills.get((ns, pod), 0.0), exporter=exporter)
        cgroup = Cgroup(container, f.get("limit"), f.get("unreclaimable"), f.get("usage"),
                        kinds.get((ns, pod, container), {}))
        pods[(ns, pod)] = Pod(p.namespace, p.pod, (*p.cgroups, cgroup), p.shm, p.orphaned,
                              p.kv_usage, p.processes, p.kills, p.exporter)
    for (ns, pod, container, name), f in sorted(procs.items()):
        if (ns, pod) in pods:
            p = pods[(ns, pod)]
            proc = Proc(container, name, f.get("rss_anon", 0.0), f.get("rss_shmem", 0.0),
                        f.get("rss_file", 0.0), int(finite(f.get("count", 0.0)) or 0))
            pods[(ns, pod)] = Pod(p.namespace, p.pod, p.cgroups, p.shm, p.orphaned,
                                  p.kv_usage, (*p.processes, proc), p.kills, p.exporter)
    return pods


# --- the local forecast: top's own reads through the rules' mirror ----------------------------
@dataclass
class Histories:
    """The reads of each cgroup (unreclaimable, kinds), process and pod /dev/shm, bounded
    per series (``MAX_POINTS``, and no denser than the short window allows)."""

    windows: fc.Windows = field(default_factory=fc.Windows.of)
    series: dict[tuple[str, ...], deque[fc.Point]] = field(default_factory=dict)

    @property
    def min_gap(self) -> float:
        return self.windows.short / 30

    @property
    def keep(self) -> float:
        """The reach of the rules' longest range: two days of floors and envelopes, each
        an hour wider (the hourly minima and maxima), and the envelope's hour offset."""
        return 2 * self.windows.baseline + 3 * self.windows.hour + self.windows.step

    def _add(self, key: tuple[str, ...], now: float, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        h = self.series.setdefault(key, deque(maxlen=MAX_POINTS))
        if h and now - h[-1][0] < self.min_gap:
            return
        h.append((now, value))
        while h and h[0][0] < now - self.keep:
            h.popleft()

    def observe(self, now: float, pods: Mapping[Key, Pod]) -> None:
        live: set[tuple[str, ...]] = set()
        for p in pods.values():
            for g in p.cgroups:
                base = (p.namespace, p.pod, g.container)
                entries: list[tuple[tuple[str, ...], float | None]] = [
                    (("u", *base), g.unreclaimable)]
                entries += [(("k", *base, k), g.kinds.get(k)) for k in ("anon", "shmem",
                                                                        "kernel")]
                for key, v in entries:
                    self._add(key, now, v)
                    live.add(key)
            for q in p.processes:
                key = ("p", p.namespace, p.pod, q.container, q.process)
                self._add(key, now, q.held)
                live.add(key)
            if p.shm is not None:
                key = ("s", p.namespace, p.pod)
                self._add(key, now, p.shm)
                live.add(key)
        for key in [k for k in self.series if k not in live]:
            del self.series[key]

    def points(self, *key: str) -> Sequence[fc.Point]:
        return tuple(self.series.get(key, ()))

    def history(self, p: Pod, g: Cgroup) -> fc.History:
        kinds = {k: self.points("k", p.namespace, p.pod, g.container, k)
                 for k in ("anon", "shmem", "kernel")}
        if g.container == "":
            kinds["dev_shm"] = self.points("s", p.namespace, p.pod)
        procs = {q.process: self.points("p", p.namespace, p.pod, q.container, q.process)
                 for q in p.processes if g.container in ("", q.container)}
        return fc.History(p.namespace, p.pod, g.container, finite(g.limit) or 0.0,
                          self.points("u", p.namespace, p.pod, g.container), kinds, procs)

    def process_growth(self, *key: str) -> float | None:
        """The process view's growth: PROCESS_GROWTH's mirror (the last hour's deriv),
        the figure the cluster view reads."""
        pts = self.points(*key)
        if len(pts) < 2:
            return None
        return fc.process_growth({"": pts}, pts[-1][0], self.windows).get("")


def local_forecasts(pods: Mapping[Key, Pod], hist: Histories, now: float
                    ) -> dict[Key, list[fc.Forecast]]:
    out: dict[Key, list[fc.Forecast]] = {}
    for key, p in pods.items():
        fs = [f for g in p.cgroups
              if (f := fc.local_forecast(hist.history(p, g), now, hist.windows)) is not None]
        out[key] = fc.mark_binding(fs)
    return out


# --- kills: seen as the counter moves ---------------------------------------------------------
@dataclass(frozen=True)
class KillMark:
    count: float
    when: float | None  # None: before top started (cluster mode: from Prometheus)
    link: str


def track_kills(old: Mapping[Key, KillMark], pods: Mapping[Key, Pod], now: float,
                first: bool) -> dict[Key, KillMark]:
    """A pod's kill counter rising between reads is a kill at this read; a pod that is
    gone keeps its mark for ``KILL_SHOWN_S``."""
    out: dict[Key, KillMark] = {}
    for key, p in pods.items():
        link = f"{p.exporter.rstrip('/')}/debug/oom/" if p.exporter else "/debug/oom/"
        prev = old.get(key)
        if p.kills <= 0:
            continue
        if prev is None:
            out[key] = KillMark(p.kills, None if first else now, link)
        elif p.kills > prev.count:
            out[key] = KillMark(p.kills, now, link)
        else:
            out[key] = prev
    for key, m in old.items():
        if key not in pods and m.when is not None and now - m.when < KILL_SHOWN_S:
            out[key] = m
    return out


# --- rows -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    namespace: str
    pod: str
    cgroup: str  # the binding cgroup: a container's name, or "(pod)"
    limit: float | None
    unreclaimable: float | None
    rate: float | None
    ttl: float | None
    horizon: str | None
    grower: str
    shm: float | None = None
    orphaned: float | None = None
    kv: float | None = None
    kill: KillMark | None = None
    gone: bool = False

    @property
    def key(self) -> Key:
        return self.namespace, self.pod

    @property
    def ratio(self) -> float | None:
        lim, u = finite(self.limit), finite(self.unreclaimable)
        if not lim or u is None:
            return None
        return u / lim

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.pod}" if self.namespace else self.pod


def row_of(f: fc.Forecast, shm: float | None = None, orphaned: float | None = None,
           kv: float | None = None, kill: KillMark | None = None) -> Row:
    return Row(f.namespace, f.pod, f.container or "(pod)", f.limit, f.unreclaimable,
               finite(f.rate), finite(f.time_to_limit), f.horizon,
               fc.grower_text(fc.growing(f.grower)), shm, orphaned, kv, kill)


def local_rows(pods: Mapping[Key, Pod], forecasts: Mapping[Key, Sequence[fc.Forecast]],
               kills: Mapping[Key, KillMark]) -> list[Row]:
    out = []
    for key, p in pods.items():
        b = fc.tightest(forecasts.get(key, ()))
        if b is None:
            g = next(iter(p.cgroups), Cgroup(""))
            out.append(Row(p.namespace, p.pod, g.container or "(pod)", g.limit,
                           g.unreclaimable, None, None, None, "-", p.shm, p.orphaned,
                           p.kv_usage, kills.get(key)))
            continue
        out.append(row_of(b, p.shm, p.orphaned, p.kv_usage, kills.get(key)))
    for key, m in kills.items():
        if key not in pods:
            out.append(Row(key[0], key[1], "-", None, None, None, None, None, "-",
                           kill=m, gone=True))
    return out


def _num_key(x: float | None, negate: bool = False) -> tuple[int, float]:
    """Sort numbers, with unknown/NaN/Inf last whichever way the column sorts."""
    v = finite(x)
    if v is None:
        return (1, 0.0)
    return (0, -v if negate else v)


def sort_rows(rs: Iterable[Row], sort: str = "t", filt: str = "") -> list[Row]:
    out = [r for r in rs if not filt or filt in r.namespace or filt in r.pod]
    keys: dict[str, Callable[[Row], tuple[object, ...]]] = {
        "t": lambda r: (_num_key(r.ttl), _num_key(r.ratio, True)),
        "u": lambda r: (_num_key(r.ratio, True),),
        "g": lambda r: (_num_key(r.rate, True),),
        "s": lambda r: (_num_key(r.shm, True),),
        "n": lambda r: (r.namespace, r.pod),
    }
    return sorted(out, key=lambda r: (*keys[sort](r), r.namespace, r.pod))


# --- drawing (pure: lines of text with a style) -----------------------------------------------
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


Line = tuple[str, str]  # text, style: "" | "head" | "bad" | "sel" | "dim"


def _fit(text: str, width: int) -> str:
    return cut(text, max(0, width - 1))


@dataclass(frozen=True)
class Column:
    title: str
    width: int
    priority: int  # dropped first: the highest number
    right: bool
    value: Callable[[Row, float], str]


def _ratio(r: Row) -> str:
    q = r.ratio
    return "n/a" if q is None else ">999%" if q > 9.99 else f"{q:.0%}"


def _kill(r: Row, now: float) -> str:
    if r.kill is None:
        return "-"
    if r.kill.when is None:
        return f"{r.kill.count:.0f} earlier"
    return f"{human_duration(max(0.0, now - r.kill.when))} ago"


COLUMNS = (
    Column("TO LIMIT", 9, 1, True, lambda r, _: "gone" if r.gone else human_duration(r.ttl)),
    Column("USED", 5, 2, True, lambda r, _: _ratio(r)),
    Column("UNRECL/LIMIT", 19, 7, True,
           lambda r, _: f"{human_bytes(r.unreclaimable)}/{human_bytes(r.limit)}"),
    Column("GROWTH", 12, 3, True, lambda r, _: human_rate(r.rate) if r.rate else "-"),
    Column("CGROUP", 10, 6, False, lambda r, _: r.cgroup),
    Column("KILL", 10, 4, True, _kill),
    Column("TOP GROWER", 16, 5, False, lambda r, _: r.grower.removesuffix(" (no process)")),
    Column("/DEV/SHM", 9, 8, True, lambda r, _: human_bytes(r.shm) if r.shm is not None
           else "-"),
    Column("ORPHANED", 9, 9, True, lambda r, _: human_bytes(r.orphaned)
           if r.orphaned is not None else "-"),
    Column("KV", 4, 10, True, lambda r, _: f"{r.kv:.0%}" if finite(r.kv) is not None
           and 0 <= (r.kv or 0) <= 9.99 else "-"),
)
NAME_MIN = 20  # namespace/pod stays readable: columns go before the name shrinks below


def layout(width: int, names: Sequence[str]) -> tuple[int, list[Column]]:
    """The name column's width and the columns that fit, dropped by priority."""
    cols = list(COLUMNS)
    longest = max((width_of(n) for n in names), default=13)

    def rest(cs: Sequence[Column]) -> int:
        return sum(col.width + 1 for col in cs)

    while cols and width - 1 - rest(cols) < min(NAME_MIN, longest):
        cols.remove(max(cols, key=lambda col: col.priority))
    nw = max(4, min(longest, width - 1 - rest(cols)))
    return nw, cols


def draw(st: State, width: int, height: int, now: float | None = None) -> list[Line]:
    now = time.time() if now is None else now
    when = time.strftime("%H:%M:%S", time.localtime(st.updated)) if st.updated else "--"
    source = ("recorded forecast" if st.source == fc.RECORDED
              else "local forecast" + (f" {st.note}" if st.note else ""))
    head = (f"headroom top  {source}  {when}  sort: {SORTS[st.sort]}"
            + (f"  filter: {st.filt}" if st.filt else "") + f"  {st.url}")
    lines: list[Line] = [(_fit(head, width), "head")]
    if st.error:
        lines.append((_fit(f"error: {st.error}", width), "bad"))
    if st.detail is not None:
        lines += _draw_detail(st, width, now)
    else:
        lines += _draw_pods(st, width, height - len(lines) - 1, now)
    footer = ("/" + (st.typing or "") + "_  (Enter apply, Esc clear)" if st.typing is not None
              else "t u g s n sort  / filter  Enter pod  Esc back  q quit")
    while len(lines) < height - 1:
        lines.append(("", ""))
    lines = lines[: height - 1]
    lines.append((_fit(footer, width), "dim"))
    return lines[:height]


def _draw_pods(st: State, width: int, room: int, now: float) -> list[Line]:
    rs = sort_rows(st.rows, st.sort, st.filt)
    nw, cols = layout(width, [r.name for r in rs])
    title = pad("NAMESPACE/POD", nw) + "".join(
        " " + pad(col.title, col.width, col.right) for col in cols)
    out: list[Line] = [(_fit(title, width), "head")]
    st.selected = min(st.selected, max(0, len(rs) - 1))
    killed = sorted((r for r in rs if r.kill is not None and r.kill.when is not None),
                    key=lambda r: -(r.kill.when if r.kill and r.kill.when else 0.0))
    body = max(0, room - 1 - (1 if killed else 0))
    for i, r in enumerate(rs[:body]):
        text = pad(cut_middle(r.name, nw), nw) + "".join(
            " " + pad(col.value(r, now), col.width, col.right) for col in cols)
        ratio = r.ratio or 0.0
        style = "sel" if i == st.selected else (
            "dim" if r.gone else
            "bad" if (r.ttl is not None and r.ttl < 3600) or ratio >= 0.9 or (
                r.kill is not None and r.kill.when is not None) else "")
        out.append((_fit(text, width), style))
    if not rs:
        out.append(("no pods" + (" match the filter" if st.filt else " yet"), "dim"))
    if killed and killed[0].kill is not None:
        k = killed[0]
        assert k.kill is not None
        # The link first: on 80 columns it is what must not be cut.
        out.append((_fit(f"last kill {_kill(k, now)}: {k.kill.link}  {k.name}", width),
                    "bad"))
    return out


def _draw_detail(st: State, width: int, now: float) -> list[Line]:
    assert st.detail is not None
    fs = st.cgroups.get(st.detail, [])
    procs = st.procs.get(st.detail, ())
    name = "/".join(x for x in st.detail if x)
    if not fs and not procs:
        m = st.kills.get(st.detail)
        return [(_fit(f"{name}: gone" + (f"; last kill: {m.link}" if m else ""), width),
                 "bad")]
    out: list[Line] = [(_fit(name, width), ""),
                       (_fit(f"{'CGROUP':<12} {'UNRECL/LIMIT':>20} {'USED':>5} "
                             f"{'GROWTH':>13} {'TO LIMIT':>9}  TOP GROWER", width), "head")]
    for f in sorted(fs, key=lambda f: (not f.binding, f.container)):
        label = (f.container or "(pod)") + (" *" if f.binding else "")
        used = f"{human_bytes(f.unreclaimable)}/{human_bytes(f.limit)}"
        out.append((_fit(f"{pad(label, 12)} {used:>20} "
                         f"{f.ratio:>5.0%} "
                         f"{human_rate(f.rate) if f.rate else '-':>13} "
                         f"{human_duration(f.time_to_limit):>9}  {fc.grower_text(f.grower)}",
                         width), "bad" if f.binding else ""))
    out.append((_fit("* binding: the cgroup the kernel will OOM-kill in first", width),
                "dim"))
    m = st.kills.get(st.detail)
    if m is not None:
        out.append((_fit(f"kills: {m.count:.0f}, last {_kill_text(m, now)}: {m.link}",
                         width), "bad"))
    if not procs:
        return out
    ns, pod = st.detail
    limits = {f.container: f.limit for f in fs}
    out.append(("", ""))
    out.append((_fit(f"{'CONTAINER':<16} {'PROCESS':<24} {'N':>3} {'ANON':>10} "
                     f"{'SHMEM':>10} {'GROWTH 1h':>13} {'LIMIT':>10}", width), "head"))
    for q in sorted(procs, key=lambda q: -(finite(q.held) or 0.0)):
        rate = (st.proc_growth.get((ns, pod, q.container, q.process))
                if st.source == fc.RECORDED
                else st.hist.process_growth("p", ns, pod, q.container, q.process))
        lim = limits.get(q.container, limits.get(""))
        out.append((_fit(f"{pad(q.container, 16)} {pad(q.process, 24)} {q.count:>3} "
                         f"{human_bytes(q.anon):>10} {human_bytes(q.shmem):>10} "
                         f"{human_rate(rate) if rate is not None else '...':>13} "
                         f"{human_bytes(lim):>10}", width), ""))
    return out


def _kill_text(m: KillMark, now: float) -> str:
    return "before top started" if m.when is None else f"{human_duration(now - m.when)} ago"


def handle_key(st: State, key: str) -> bool:
    """Apply one key; False to quit."""
    if st.typing is not None:
        if key in ("\n", "\r", "KEY_ENTER"):
            st.filt, st.typing, st.selected = st.typing, None, 0
        elif key == "\x1b":
            st.typing, st.filt = None, ""
        elif key in ("KEY_BACKSPACE", "\x7f", "\b"):
            st.typing = st.typing[:-1]
        elif len(key) == 1 and key.isprintable():
            st.typing += key
        return True
    if key == "q":
        return False
    if st.detail is not None:
        if key in ("\x1b", "KEY_BACKSPACE", "\x7f", "\b", "KEY_LEFT", "h"):
            st.detail = None
        return True
    if key in SORTS:
        st.sort, st.selected = key, 0
    elif key == "/":
        st.typing = st.filt
    elif key == "\x1b":
        st.filt = ""
    elif key in ("KEY_DOWN", "j"):
        st.selected += 1
    elif key in ("KEY_UP", "k"):
        st.selected = max(0, st.selected - 1)
    elif key in ("\n", "\r", "KEY_ENTER", "KEY_RIGHT", "l"):
        rs = sort_rows(st.rows, st.sort, st.filt)
        if rs:
            st.detail = rs[min(st.selected, len(rs) - 1)].key
    return True


# --- the two sources --------------------------------------------------------------------------
@dataclass(frozen=True)
class Read:
    when: float
    error: str = ""
    pods: dict[Key, Pod] | None = None  # local: one exposition
    cluster: Cluster | None = None  # --prometheus: the recorded series


@dataclass(frozen=True)
class Cluster:
    forecasts: dict[fc.Workload, fc.Forecast]
    shm: dict[Key, float]
    orphaned: dict[Key, float]
    kv: dict[Key, float]
    kills: dict[Key, KillMark]
    processes: dict[Key, tuple[Proc, ...]] = field(default_factory=dict)
    process_growth: dict[tuple[str, str, str, str], float] = field(default_factory=dict)


def _http(url: str, data: bytes | None = None, timeout: float = 5.0) -> bytes:
    req = urllib.request.Request(url, data=data, headers={
        "Accept": "text/plain, application/json",
        **({"Content-Type": "application/x-www-form-urlencoded"} if data else {})})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body: bytes = r.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise ValueError(f"answer larger than {MAX_BODY >> 20} MiB")
    return body


def fetch(url: str, timeout: float = 2.0) -> str:
    return _http(url, timeout=timeout).decode("utf-8", "replace")


def cluster_queries(extra: str = "") -> dict[str, str]:
    sel = "{" + extra + "}" if extra else ""
    q = fc.recorded_queries(sel)
    shm = "{" + ", ".join(x for x in (extra, 'mount="/dev/shm"') if x) + "}"
    q["shm"] = (f"sum by (namespace, pod) (max by (namespace, pod, mount) "
                f"({c.TMPFS_USED_BYTES.name}{shm}))")
    q["orphaned"] = (f"sum by (namespace, pod) (max by (namespace, pod, mount) "
                     f"({c.TMPFS_ORPHANED_BYTES.name}{sel}))")
    kv = "{" + ", ".join(x for x in (extra, 'medium="gpu"') if x) + "}"
    q["kv"] = f"max by (namespace, pod) ({c.VLLM_KV_CACHE_USAGE_RATIO.name}{kv})"
    kills = "{" + ", ".join(x for x in (extra, 'container=""') if x) + "}"
    q["kills"] = f"sum by (namespace, pod, instance) ({c.OOM_KILLS_TOTAL.name}{kills})"
    # When each pod's counter last moved (to the minute), over the last day.
    q["kill_at"] = (f"max by (namespace, pod) (max_over_time((timestamp("
                    f"{c.OOM_KILLS_TOTAL.name}{kills}) and changes("
                    f"{c.OOM_KILLS_TOTAL.name}{kills}[2m]) > 0)[1d:1m]))")
    # The process view: what the local view reads from the exposition (anon, shmem and
    # count per process; max over exporters that overlap in a rollout), and the growth
    # the rules record (PROCESS_GROWTH, in recorded_queries).
    procs = "{" + ", ".join(x for x in (extra, 'kind=~"rss_anon|rss_shmem"') if x) + "}"
    q["proc_memory"] = (f"max by (namespace, pod, container, process, kind) "
                        f"({c.PROCESS_MEMORY_BYTES.name}{procs})")
    q["proc_count"] = (f"max by (namespace, pod, container, process) "
                       f"({c.PROCESS_COUNT.name}{sel})")
    return q


def query_prometheus(base: str, expr: str, timeout: float = 10.0) -> list[Sample]:
    from exporter.oncall.prom_client import parse_vector
    body = _http(f"{base.rstrip('/')}/api/v1/query",
                 urllib.parse.urlencode({"query": expr}).encode(), timeout)
    doc = json.loads(body)
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, dict) else doc
        raise ValueError(f"query failed: {str(error)[:200]}")
    return parse_vector(doc)


def cluster_of(answers: Mapping[str, Sequence[Sample]]) -> Cluster:
    """The answers of :func:`cluster_queries` -> forecasts and each pod's extras."""
    def per_pod(name: str) -> dict[Key, float]:
        return {(printable(s.labels.get("namespace", "")), printable(s.labels.get("pod", ""))):
                s.value for s in answers.get(name, ())}

    clean = {k: [Sample({lk: printable(lv) for lk, lv in s.labels.items()}, s.value)
                 for s in v] for k, v in answers.items()}
    at = per_pod("kill_at")
    kills: dict[Key, KillMark] = {}
    for s in clean.get("kills", ()):
        key = (s.labels.get("namespace", ""), s.labels.get("pod", ""))
        if s.value > 0:
            inst = s.labels.get("instance", "")
            kills[key] = KillMark(s.value, at.get(key),
                                  f"http://{inst}/debug/oom/" if inst else "/debug/oom/")
    return Cluster(fc.from_recorded(clean), per_pod("shm"), per_pod("orphaned"),
                   per_pod("kv"), kills, *cluster_processes(clean))


def cluster_processes(answers: Mapping[str, Sequence[Sample]]
                      ) -> tuple[dict[Key, tuple[Proc, ...]],
                                 dict[tuple[str, str, str, str], float]]:
    """The process view's rows per pod and their recorded growth (PROCESS_GROWTH)."""
    def ident(s: Sample) -> tuple[str, str, str, str]:
        lb = s.labels
        return (lb.get("namespace", ""), lb.get("pod", ""), lb.get("container", ""),
                lb.get("process", ""))

    parts: dict[tuple[str, str, str, str], dict[str, float]] = {}
    for s in answers.get("proc_memory", ()):
        parts.setdefault(ident(s), {})[s.labels.get("kind", "")] = s.value
    for s in answers.get("proc_count", ()):
        parts.setdefault(ident(s), {})["count"] = s.value
    procs: dict[Key, tuple[Proc, ...]] = {}
    for (ns, pod, cont, name), f in sorted(parts.items()):
        proc = Proc(cont, name, finite(f.get("rss_anon")) or 0.0,
                    finite(f.get("rss_shmem")) or 0.0, 0.0,
                    int(finite(f.get("count")) or 0))
        procs[(ns, pod)] = (*procs.get((ns, pod), ()), proc)
    growth = {ident(s): s.value for s in answers.get("process_growth", ())
              if math.isfinite(s.value)}
    return procs, growth


def fetch_cluster(base: str, extra: str = "", timeout: float = 10.0) -> Cluster:
    qs = cluster_queries(extra)
    return cluster_of({k: query_prometheus(base, q, timeout) for k, q in qs.items()})


def cluster_rows(cl: Cluster) -> tuple[list[Row], dict[Key, list[fc.Forecast]]]:
    pods = fc.by_pod(cl.forecasts)
    rows = []
    for key, fs in pods.items():
        b = fc.tightest(fs)
        if b is not None:
            rows.append(row_of(b, cl.shm.get(key), cl.orphaned.get(key), cl.kv.get(key),
                               cl.kills.get(key)))
    return rows, pods


class Reader:
    """Reads its source every ``interval`` in a thread: a slow or hung exporter or
    Prometheus never freezes the keys. Only the newest read is kept."""

    def __init__(self, read: Callable[[], Read], interval: float) -> None:
        self._read, self._interval = read, interval
        self._latest: queue.Queue[Read] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="headroom-top-reader",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                read = self._read()
            except Exception as exc:  # a restart of the source must not end the view
                read = Read(time.time(), f"{type(exc).__name__}: {exc}"[:200])
            with contextlib.suppress(queue.Empty):
                self._latest.get_nowait()  # drop an unread older one
            self._latest.put(read)
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - started)))

    def latest(self) -> Read | None:
        try:
            return self._latest.get_nowait()
        except queue.Empty:
            return None

    def stop(self) -> None:
        self._stop.set()


def local_reader(url: str, base: str) -> Callable[[], Read]:
    def read() -> Read:
        now = time.time()
        return Read(now, pods=parse(fetch(url), base))
    return read


def cluster_reader(base: str, extra: str) -> Callable[[], Read]:
    def read() -> Read:
        return Read(time.time(), cluster=fetch_cluster(base, extra))
    return read


def apply(st: State, read: Read) -> None:
    st.error = read.error
    if read.cluster is not None:
        st.source = fc.RECORDED
        st.updated = read.when
        st.rows, st.cgroups = cluster_rows(read.cluster)
        st.kills = dict(read.cluster.kills)
        st.procs = dict(read.cluster.processes)
        st.proc_growth = dict(read.cluster.process_growth)
        return
    if read.pods is None:
        return
    first = st.reads == 0
    st.reads += 1
    st.updated = read.when
    st.procs = {k: p.processes for k, p in read.pods.items()}
    st.hist.observe(read.when, read.pods)
    # As the rules do: a forecast per evaluation step, not per read (each costs a pass
    # over every series); a pod that came or went is forecast at once.
    if (st.forecast_at is None or read.when - st.forecast_at >= st.hist.windows.step
            or set(read.pods) != set(st.cgroups)):
        st.cgroups = local_forecasts(read.pods, st.hist, read.when)
        st.forecast_at = read.when
    st.kills = track_kills(st.kills, read.pods, read.when, first)
    st.rows = local_rows(read.pods, st.cgroups, st.kills)


def _loop(screen: curses.window, st: State, reader: Reader) -> None:
    curses.curs_set(0)
    curses.use_default_colors()
    styles = {"": curses.A_NORMAL, "head": curses.A_BOLD, "dim": curses.A_DIM,
              "sel": curses.A_REVERSE, "bad": curses.A_BOLD}
    if curses.has_colors():
        curses.init_pair(1, curses.COLOR_RED, -1)
        styles["bad"] = curses.color_pair(1) | curses.A_BOLD
    screen.timeout(100)
    instant_errors = 0
    while True:
        read = reader.latest()
        if read is not None:
            apply(st, read)
        height, width = screen.getmaxyx()
        screen.erase()
        for y, (text, style) in enumerate(draw(st, width, height)):
            # The last cell of the screen, or a resize under way: skip the line.
            with contextlib.suppress(curses.error):
                screen.addstr(y, 0, text, styles[style])
        screen.refresh()
        asked = time.monotonic()
        try:
            key = screen.getkey()
        except curses.error:
            # No key within the timeout; at once, again and again: the terminal is gone
            # (a hung-up pty reads EOF), and spinning on it would burn a core.
            instant_errors = instant_errors + 1 if time.monotonic() - asked < 0.02 else 0
            if instant_errors >= 50:
                return
            continue
        instant_errors = 0
        if key == "KEY_RESIZE":
            continue
        if not handle_key(st, key):
            return


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:9847",
                   help="the local exporter (default http://127.0.0.1:9847)")
    p.add_argument("--prometheus", dest="prometheus", default=None, metavar="URL",
                   help="cluster mode: every pod from Prometheus' recorded forecast "
                        "(the shipped recording rules must be loaded)")
    p.add_argument("--selector", default="",
                   help='extra label matchers in cluster mode, e.g. job="headroom"')
    p.add_argument("--interval", type=float, default=None,
                   help="seconds between reads (default 1; 10 with --prometheus)")
    p.add_argument("--forecast.scale", dest="forecast_scale", type=float, default=1.0,
                   help="divide the rules' windows by this in local mode (demos, tests)")


def _hung_up(*_: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    base = (args.prometheus or args.url).rstrip("/")
    problem = url_problem(base)
    if problem:
        print(f"headroom top: {problem}", file=sys.stderr)
        return 2
    if not sys.stdout.isatty():
        print("headroom top: needs a terminal", file=sys.stderr)
        return 2
    scale = max(1.0, float(args.forecast_scale))
    windows = fc.Windows.of(CONFIG.scaled(scale) if scale > 1 else CONFIG,
                            60.0 / scale)
    st = State(base, hist=Histories(windows),
               note=f"(windows /{scale:g})" if scale > 1 else "")
    if args.prometheus:
        st.source = fc.RECORDED
        reader = Reader(cluster_reader(base, args.selector), max(2.0, args.interval or 10.0))
    else:
        url = base if base.endswith("/metrics") else base + "/metrics"
        exporter = base.removesuffix("/metrics")
        reader = Reader(local_reader(url, exporter), max(0.2, args.interval or 1.0))
    # ncurses prefers LINES/COLUMNS over the terminal's real size; an exported copy goes
    # stale at the first resize (and some launchers set 80x24): ask the terminal.
    for name in ("LINES", "COLUMNS"):
        os.environ.pop(name, None)
    # A closed terminal ends it like q, even when the launcher left SIGHUP ignored.
    signal.signal(signal.SIGHUP, _hung_up)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends it like q
            curses.wrapper(_loop, st, reader)
    finally:
        reader.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="headroom top",
                                description="A live view of pods: how close, when, what grows")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
