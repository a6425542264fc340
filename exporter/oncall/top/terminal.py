"""The ``headroom top`` command: its flags, and the curses loop (which restores the
terminal on exit or error)."""

from __future__ import annotations

import argparse
import contextlib
import curses
import os
import signal
import sys
import time
from collections.abc import Sequence

from exporter.oncall import forecast as fc
from exporter.oncall.prom_client import url_problem
from exporter.oncall.top.history import Histories
from exporter.oncall.top.keys import handle_key
from exporter.oncall.top.reader import Reader, apply, cluster_reader, local_reader
from exporter.oncall.top.screen import draw
from exporter.oncall.top.state import State
from exporter.promql import CONFIG


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

