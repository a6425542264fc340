"""The screen layout, pure: the state -> lines of text with a style. Columns are
dropped by priority on a narrow terminal; names are cut in the middle."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from exporter.oncall import forecast as fc
from exporter.oncall.top.cells import (
    cut,
    cut_middle,
    finite,
    human_bytes,
    human_duration,
    human_rate,
    pad,
    width_of,
)
from exporter.oncall.top.rows import SORTS, KillMark, Row, sort_rows
from exporter.oncall.top.state import State

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
    Column("TO LIMIT", 9, 1, True, lambda r, _: "gone" if r.gone else
           "in noise" if r.noise else human_duration(r.ttl)),
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
            "bad" if (r.ttl is not None and r.ttl < 3600) or ratio >= 0.9 or r.noise or (
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

