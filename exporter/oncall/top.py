"""``headroom top``: a live terminal view of this node, from the local exporter's /metrics.

Pods sorted by time to limit, each with unreclaimable / limit, its growth rate (from
successive reads), the top process, /dev/shm and vLLM KV-cache usage. Keys: ``t u g s n``
sort (time to limit, fullness, growth, /dev/shm, name), ``/`` filters (namespace or pod
substring; Enter applies, Esc clears), arrows or ``j k`` move, Enter opens a pod's
processes (Esc or Backspace goes back), ``q`` quits. Refreshes every second; keyboard
only, so it works over SSH.

The model (parse, rates, sorting, the lines to draw) is pure; only ``run`` touches the
terminal (curses, which restores it on exit or error) and the network.
"""

from __future__ import annotations

import argparse
import contextlib
import curses
import math
import os
import queue
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from exporter import catalog as c
from exporter.oncall.diagnose import fmt_bytes, fmt_duration, fmt_rate, printable

RATE_WINDOW = 30.0  # seconds of reads a growth rate is measured over
SORTS = {"t": "time to limit", "u": "used/limit", "g": "growth", "s": "/dev/shm",
         "n": "name"}


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
class Pod:
    namespace: str
    pod: str
    limit: float | None = None
    unreclaimable: float | None = None
    usage: float | None = None
    shm: float | None = None
    kv_usage: float | None = None
    processes: tuple[Proc, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.pod

    @property
    def ratio(self) -> float:
        if not self.limit or self.unreclaimable is None:
            return 0.0
        return self.unreclaimable / self.limit

    @property
    def top_process(self) -> Proc | None:
        return max(self.processes, key=lambda p: p.held, default=None)


def parse(text: str) -> dict[tuple[str, str], Pod]:
    """An exposition -> one row per pod: its pod-level cgroup (``container=""``), or the
    largest container when the exporter has no pod-level series for it."""
    cg: dict[tuple[str, str, str], dict[str, float]] = {}
    procs: dict[tuple[str, str, str, str], dict[str, float]] = {}
    shm: dict[tuple[str, str], float] = {}
    kv: dict[tuple[str, str], float] = {}
    wanted = {c.MEMORY_LIMIT_BYTES.name: "limit",
              c.MEMORY_UNRECLAIMABLE_BYTES.name: "unreclaimable",
              c.MEMORY_USAGE_BYTES.name: "usage"}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            lb = {k: printable(v) for k, v in s.labels.items()}  # hostile names
            w = (lb.get("namespace", ""), lb.get("pod", ""), lb.get("container", ""))
            if s.name in wanted:
                cg.setdefault(w, {})[wanted[s.name]] = s.value
            elif s.name == c.PROCESS_MEMORY_BYTES.name:
                procs.setdefault((*w, lb.get("process", "")), {})[lb.get("kind", "")] = s.value
            elif s.name == c.PROCESS_COUNT.name:
                procs.setdefault((*w, lb.get("process", "")), {})["count"] = s.value
            elif s.name == c.TMPFS_USED_BYTES.name and lb.get("mount") == "/dev/shm":
                shm[w[:2]] = shm.get(w[:2], 0.0) + s.value
            elif s.name == c.VLLM_KV_CACHE_USAGE_RATIO.name and lb.get("medium") == "gpu":
                kv[w[:2]] = max(kv.get(w[:2], 0.0), s.value)
    chosen: dict[tuple[str, str], dict[str, float]] = {}
    for (ns, pod, container), f in sorted(cg.items()):
        if (ns, pod, "") in cg:
            if container == "":
                chosen[(ns, pod)] = f
        elif f.get("unreclaimable", 0.0) >= chosen.get((ns, pod), {}).get("unreclaimable",
                                                                          -1.0):
            chosen[(ns, pod)] = f
    pods = {k: Pod(k[0], k[1], f.get("limit"), f.get("unreclaimable"), f.get("usage"),
                   shm.get(k), kv.get(k)) for k, f in chosen.items()}
    for (ns, pod, container, name), f in procs.items():
        if (ns, pod) in pods:
            p = pods[(ns, pod)]
            pods[(ns, pod)] = replace(p, processes=(*p.processes, Proc(
                container, name, f.get("rss_anon", 0.0), f.get("rss_shmem", 0.0),
                f.get("rss_file", 0.0), int(f.get("count", 0)))))
    return pods


@dataclass
class Rates:
    """Unreclaimable memory of each pod over the last reads -> growth in bytes/s."""

    window: float = RATE_WINDOW
    history: dict[tuple[str, str], deque[tuple[float, float]]] = field(default_factory=dict)

    def observe(self, now: float, pods: Mapping[tuple[str, str], Pod]) -> None:
        for key, p in pods.items():
            if p.unreclaimable is None:
                continue
            h = self.history.setdefault(key, deque())
            h.append((now, p.unreclaimable))
            while h and h[0][0] < now - self.window:
                h.popleft()
        for key in [k for k in self.history if k not in pods]:
            del self.history[key]

    def rate(self, key: tuple[str, str]) -> float | None:
        """Least-squares slope of the reads kept (one noisy read does not swing it)."""
        h = self.history.get(key)
        if not h or len(h) < 2 or h[-1][0] - h[0][0] < 1.5:
            return None
        n = len(h)
        mt = sum(t for t, _ in h) / n
        mv = sum(v for _, v in h) / n
        den = sum((t - mt) ** 2 for t, _ in h)
        return sum((t - mt) * (v - mv) for t, v in h) / den if den else None


def time_to_limit(p: Pod, rate: float | None) -> float | None:
    if rate is None or rate <= 0 or p.limit is None or p.unreclaimable is None:
        return None
    return max(0.0, p.limit - p.unreclaimable) / rate


@dataclass(frozen=True)
class Row:
    pod: Pod
    rate: float | None
    ttl: float | None


def rows(pods: Iterable[Pod], rates: Rates, sort: str = "t", filt: str = "") -> list[Row]:
    out = [Row(p, rates.rate(p.key), time_to_limit(p, rates.rate(p.key))) for p in pods
           if not filt or filt in p.namespace or filt in p.pod]
    keys: dict[str, Callable[[Row], tuple[object, ...]]] = {
        "t": lambda r: (r.ttl if r.ttl is not None else math.inf, -r.pod.ratio),
        "u": lambda r: (-r.pod.ratio,),
        "g": lambda r: (-(r.rate or 0.0),),
        "s": lambda r: (-(r.pod.shm or 0.0),),
        "n": lambda r: (r.pod.namespace, r.pod.pod),
    }
    return sorted(out, key=lambda r: (*keys[sort](r), r.pod.namespace, r.pod.pod))


# --- drawing (pure: lines of text with a style) --------------------------------------------------
@dataclass
class State:
    url: str
    sort: str = "t"
    filt: str = ""
    typing: str | None = None  # the filter being typed
    selected: int = 0
    detail: tuple[str, str] | None = None  # the pod whose processes are shown
    error: str = ""
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    rates: Rates = field(default_factory=Rates)
    updated: float = 0.0


Line = tuple[str, str]  # text, style: "" | "head" | "bad" | "sel" | "dim"


def _fit(text: str, width: int) -> str:
    return text[: max(0, width - 1)]


def _ratio_text(p: Pod) -> str:
    if p.limit is None or p.unreclaimable is None:
        return "?"
    return f"{fmt_bytes(p.unreclaimable)}/{fmt_bytes(p.limit)} {p.ratio:4.0%}"


def draw(st: State, width: int, height: int) -> list[Line]:
    when = time.strftime("%H:%M:%S", time.localtime(st.updated)) if st.updated else "--"
    head = (f"headroom top  {st.url}  {when}  sort: {SORTS[st.sort]}"
            + (f"  filter: {st.filt}" if st.filt else ""))
    lines: list[Line] = [(_fit(head, width), "head")]
    if st.error:
        lines.append((_fit(f"error: {st.error}", width), "bad"))
    if st.detail is not None:
        lines += _draw_detail(st, width)
    else:
        lines += _draw_pods(st, width, height - len(lines) - 1)
    footer = ("/" + (st.typing or "") + "_  (Enter apply, Esc clear)" if st.typing is not None
              else "t u g s n sort  / filter  Enter processes  Esc back  q quit")
    while len(lines) < height - 1:
        lines.append(("", ""))
    lines = lines[: height - 1]
    lines.append((_fit(footer, width), "dim"))
    return lines


def _name(p: Pod) -> str:
    return f"{p.namespace}/{p.pod}" if p.namespace else p.pod


REST = 95  # width of the columns after the name


def _draw_pods(st: State, width: int, room: int) -> list[Line]:
    rs = rows(st.pods.values(), st.rates, st.sort, st.filt)
    # The name column takes what the terminal has left (pod UIDs are 36 characters).
    nw = max(16, min(max((len(_name(r.pod)) for r in rs), default=13), width - REST))
    cols = (f"{'NAMESPACE/POD':<{nw}} {'UNRECLAIMABLE/LIMIT':>26} {'GROWTH':>14} "
            f"{'TO LIMIT':>10} {'TOP PROCESS':<22} {'/DEV/SHM':>10} {'KV':>5}")
    out: list[Line] = [(_fit(cols, width), "head")]
    st.selected = min(st.selected, max(0, len(rs) - 1))
    for i, r in enumerate(rs[: max(0, room - 1)]):
        p = r.pod
        top = p.top_process
        text = (f"{_name(p)[:nw]:<{nw}} {_ratio_text(p):>26} "
                f"{fmt_rate(r.rate) if r.rate is not None else '...':>14} "
                f"{fmt_duration(r.ttl) if r.ttl is not None else '-':>10} "
                f"{(top.process if top else '-')[:22]:<22} "
                f"{fmt_bytes(p.shm) if p.shm is not None else '-':>10} "
                f"{f'{p.kv_usage:.0%}' if p.kv_usage is not None else '-':>5}")
        style = "sel" if i == st.selected else (
            "bad" if (r.ttl is not None and r.ttl < 3600) or p.ratio >= 0.9 else "")
        out.append((_fit(text, width), style))
    if not rs:
        out.append(("no pods" + (" match the filter" if st.filt else " yet"), "dim"))
    return out


def _draw_detail(st: State, width: int) -> list[Line]:
    assert st.detail is not None
    p = st.pods.get(st.detail)
    if p is None:
        return [("the pod is gone", "bad")]
    rate = st.rates.rate(p.key)
    out: list[Line] = [
        (_fit(f"{_name(p)}  {_ratio_text(p)}  growth "
              f"{fmt_rate(rate) if rate is not None else '...'}", width), ""),
        (_fit(f"{'CONTAINER':<16} {'PROCESS':<28} {'N':>3} {'ANON':>10} {'SHMEM':>10} "
              f"{'FILE':>10}", width), "head")]
    for q in sorted(p.processes, key=lambda q: -q.held):
        out.append((_fit(f"{q.container[:16]:<16} {q.process[:28]:<28} {q.count:>3} "
                         f"{fmt_bytes(q.anon):>10} {fmt_bytes(q.shmem):>10} "
                         f"{fmt_bytes(q.file):>10}", width), ""))
    return out


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
        rs = rows(st.pods.values(), st.rates, st.sort, st.filt)
        if rs:
            st.detail = rs[min(st.selected, len(rs) - 1)].pod.key
    return True


# --- I/O ----------------------------------------------------------------------------------------
def fetch(url: str, timeout: float = 2.0) -> str:
    req = urllib.request.Request(url, headers={"Accept": "text/plain"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body: bytes = r.read(64 << 20)  # a node's exposition is a few MB at most
    return body.decode("utf-8", "replace")


Read = tuple[float, dict[tuple[str, str], Pod] | None, str]  # (when, pods, error)


class Reader:
    """Reads /metrics every ``interval`` in a thread: a slow or hung exporter never
    freezes the keys. Only the newest read is kept."""

    def __init__(self, url: str, interval: float) -> None:
        self._url, self._interval = url, interval
        self._latest: queue.Queue[Read] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="headroom-top-reader",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                read: Read = (started, parse(fetch(self._url)), "")
            except Exception as exc:  # the exporter restarting must not end the view
                read = (started, None, f"{type(exc).__name__}: {exc}"[:200])
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


def apply(st: State, read: Read) -> None:
    when, pods, error = read
    st.error = error
    if pods is None:
        return
    st.updated = time.time()
    st.pods = pods
    st.rates.observe(when, pods)


def _loop(screen: curses.window, st: State, reader: Reader) -> None:
    curses.curs_set(0)
    curses.use_default_colors()
    styles = {"": curses.A_NORMAL, "head": curses.A_BOLD, "dim": curses.A_DIM,
              "sel": curses.A_REVERSE, "bad": curses.A_BOLD}
    if curses.has_colors():
        curses.init_pair(1, curses.COLOR_RED, -1)
        styles["bad"] = curses.color_pair(1) | curses.A_BOLD
    screen.timeout(100)
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
        try:
            key = screen.getkey()
        except curses.error:
            continue  # no key within the timeout
        if key == "KEY_RESIZE":
            continue
        if not handle_key(st, key):
            return


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:9847",
                   help="the local exporter (default http://127.0.0.1:9847)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between reads")


def run(args: argparse.Namespace) -> int:
    base = args.url.rstrip("/")
    url = base if base.endswith("/metrics") else base + "/metrics"
    if not sys.stdout.isatty():
        print("headroom top: needs a terminal", file=sys.stderr)
        return 2
    st = State(base)
    # ncurses prefers LINES/COLUMNS over the terminal's real size; an exported copy goes
    # stale at the first resize (and some launchers set 80x24): ask the terminal.
    for name in ("LINES", "COLUMNS"):
        os.environ.pop(name, None)
    reader = Reader(url, max(0.2, args.interval))
    try:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends it like q
            curses.wrapper(_loop, st, reader)
    finally:
        reader.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="headroom top",
                                description="A live view of this node's pods")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
