"""``headroom top``'s pure model: an exposition -> pods, growth from successive reads,
sorting, filtering, the keys and the lines drawn. (The real terminal is in
``tests/oncall/test_oncall_real.py``: tmux against a real exporter.)"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.catalog import KIND_ANON
from exporter.oncall import forecast as fc
from exporter.oncall.forecast.mirror import pattern_time_to_limit
from exporter.oncall.forecast.series import (
    above_pattern,
    envelope,
    fallen_floor,
    floor_rise,
    floor_rise_past_fall,
    greatest_recent_pattern_rise,
    growth,
    highest,
    pattern_rise,
    ramp_growth,
    recent_pattern_rise,
    teeth,
    week_peaks_since,
)
from exporter.oncall.top import (
    COLUMNS,
    Histories,
    Read,
    State,
    apply,
    cut_middle,
    draw,
    handle_key,
    parse,
    sort_rows,
    width_of,
)
from exporter.oncall.top.rows import row_of
from exporter.promql import CONFIG

GOLDEN = Path(__file__).parents[1] / "golden" / "v1-cgroupfs-containerd-gpu-vllm.prom"
MiB, GiB = 1 << 20, 1 << 30


SCALE = 60.0  # windows /60: the short climb counts after 7 s of reads


def windows() -> fc.Windows:
    return fc.Windows.of(CONFIG.scaled(SCALE), 1.0)


def test_parse_a_real_exposition() -> None:
    """The golden exposition (fixture host tree, the exporter's real renderer)."""
    pods = parse(GOLDEN.read_text(), "http://node-1:9847")
    llama = pods[("llm-serving", "llama-70b-0")]
    assert {g.container for g in llama.cgroups} >= {""}
    assert next(g for g in llama.cgroups if g.container == "").limit == 40 * GiB
    assert llama.shm == 2684354560
    assert llama.kv_usage is not None and 0 <= llama.kv_usage <= 1
    assert any(q.process.startswith(("Worker", "EngineCore", "APIServer"))
               for q in llama.processes)
    assert all(p.pod for p in pods.values())


def exposition(ns: str, pod: str, cgroups: dict[str, tuple[float, float]],
               procs: dict[tuple[str, str], float] | None = None, kills: float = 0,
               orphaned: float | None = None) -> str:
    lines = []
    for cont, (limit, u) in cgroups.items():
        w = f'namespace="{ns}",pod="{pod}",container="{cont}"'
        lines += [f"headroom_memory_limit_bytes{{{w}}} {limit}",
                  f"headroom_memory_unreclaimable_bytes{{{w}}} {u}",
                  f'headroom_memory_bytes{{{w},kind="anon"}} {u}']
    for (cont, name), v in (procs or {}).items():
        w = f'namespace="{ns}",pod="{pod}",container="{cont}",process="{name}"'
        lines.append(f'headroom_process_memory_bytes{{{w},kind="rss_anon"}} {v}')
    pw = f'namespace="{ns}",pod="{pod}",container=""'
    if kills:
        lines += ["# TYPE headroom_oom_kills counter",
                  f'headroom_oom_kills_total{{{pw},process="python3"}} {kills}']
    if orphaned is not None:
        lines.append(f'headroom_tmpfs_orphaned_bytes{{{pw},mount="/dev/shm"}} {orphaned}')
    return "\n".join(lines) + "\n"


def feed(st: State, reads: list[tuple[float, str]]) -> None:
    for t, text in reads:
        apply(st, Read(t, pods=parse(text, "http://node-1:9847")))


def test_rows_are_on_the_binding_cgroup_and_forecast_by_the_rules_mirror() -> None:
    """The container's 160 MiB limit binds before the pod's 480 MiB: the row is the
    container's, and its time to limit comes from the sustained short slope."""
    st = State("x", hist=Histories(windows()))
    reads = []
    for t in range(0, 20):
        u = 40 * MiB + t * 2 * MiB
        reads.append((float(t), exposition("llm", "vllm-0", {
            "": (480 * MiB, u + 8 * MiB), "vllm": (160 * MiB, u)},
            {("vllm", "EngineCore"): u - 10 * MiB, ("vllm", "APIServer"): 10 * MiB})))
    feed(st, reads)
    (row,) = st.rows
    assert row.cgroup == "vllm" and row.horizon == "short"
    assert row.rate == pytest.approx(2 * MiB)
    assert row.ttl == pytest.approx((160 * MiB - 78 * MiB) / (2 * MiB), rel=0.01)
    assert row.grower == "EngineCore anon"
    # The same reads through the mirror directly: one definition.
    f = fc.tightest(st.cgroups[("llm", "vllm-0")])
    assert f is not None and f.container == "vllm" and f.time_to_limit == row.ttl


def test_a_climb_top_saw_begin_is_read_as_the_rules_read_a_young_series() -> None:
    """A pod that appears while top watches and has only climbed has no known pattern
    (a warm-up or a first tooth looks the same): its climb counts only near the limit,
    as the rules count it. The same climb on a pod that was there when top started is
    one whose pattern top has not read yet: it is forecast from what top saw."""
    def climb(t: int) -> dict[str, tuple[float, float]]:
        return {"": (160 * MiB, 40 * MiB + t * 2 * MiB)}

    born = State("x", hist=Histories(windows()))
    feed(born, [(0.0, exposition("llm", "other", {"": (GiB, 10 * MiB)}))]
         + [(float(t), exposition("llm", "other", {"": (GiB, 10 * MiB)})
             + exposition("llm", "young", climb(t))) for t in range(1, 21)])
    (young,) = [r for r in born.rows if r.pod == "young"]
    assert young.ttl is None and young.horizon is None
    seen = State("x", hist=Histories(windows()))
    feed(seen, [(float(t), exposition("llm", "young", climb(t))) for t in range(1, 21)])
    (old,) = seen.rows
    assert old.horizon == "short"
    assert old.ttl == pytest.approx((160 * MiB - 80 * MiB) / (2 * MiB), rel=0.01)


def test_a_kill_shows_in_the_row_with_its_age_and_link() -> None:
    st = State("x", hist=Histories(windows()))
    feed(st, [(0.0, exposition("llm", "p", {"": (GiB, 10 * MiB)})),
              (1.0, exposition("llm", "p", {"": (GiB, 10 * MiB)}, kills=1))])
    (row,) = st.rows
    assert row.kill is not None and row.kill.when == 1.0
    assert row.kill.link == "http://node-1:9847/debug/oom/"
    text = [t for t, _ in draw(st, 80, 24, now=61.0)]
    assert any("1 min ago" in t or "60 s ago" in t for t in text), text
    assert any("http://node-1:9847/debug/oom/" in t for t in text)
    # The pod's cgroups are removed: it stays on screen as gone, with its kill.
    feed(st, [(2.0, exposition("llm", "q", {"": (GiB, 10 * MiB)}))])
    gone = [r for r in st.rows if r.pod == "p"]
    assert gone and gone[0].gone and gone[0].kill is not None


def test_orphaned_dev_shm_is_a_column() -> None:
    st = State("x", hist=Histories(windows()))
    feed(st, [(0.0, exposition("llm", "p", {"": (GiB, 10 * MiB)}, orphaned=48 * MiB))])
    lines = [t for t, _ in draw(st, 160, 20)]
    assert "ORPHANED" in lines[1] and "48.0 MiB" in lines[2]


def test_nan_inf_and_huge_values_are_shown_as_such_and_sorted_last() -> None:
    st = State("x", hist=Histories(windows()))
    feed(st, [(0.0, exposition("a", "nan", {"": (GiB, float("nan"))})
               + exposition("a", "inf", {"": (float("inf"), 10 * MiB)})
               + exposition("a", "huge", {"": (1e300, 1e300)})
               + exposition("a", "ok", {"": (GiB, 900 * MiB)}))])
    lines = [t for t, _ in draw(st, 200, 20)]
    body = "\n".join(lines)
    assert "nan" not in body.replace("a/nan", "") and "inf B" not in body
    assert ">999 PiB" in body and "n/a" in body
    assert all(len(t) < 200 for t in lines)
    for key in ("t", "u"):
        order = [r.pod for r in sort_rows(st.rows, key)]
        assert order.index("ok") < order.index("nan"), (key, order)


def test_widths_are_counted_in_terminal_columns() -> None:
    assert width_of("推理服务") == 8 and width_of("e\u0301") == 1
    name = "推理/服务-" + "x" * 40 + "-tail9"
    cut_name = cut_middle(name, 20)
    assert width_of(cut_name) <= 20 and cut_name.endswith("tail9")
    st = State("x", hist=Histories(windows()))
    feed(st, [(0.0, exposition("推理", "服务-0", {"": (GiB, 10 * MiB)})
               + exposition("llm", "p", {"": (GiB, 10 * MiB)}))])
    for width in (80, 160):
        lines = [t for t, _ in draw(st, width, 24)]
        assert all(width_of(t) < width for t in lines), lines
        assert len({width_of(t) for t in lines[1:4] if t}) == 1, lines  # columns line up


def test_80_columns_keep_the_distinguishing_end_of_the_name_and_drop_by_priority() -> None:
    st = State("x", hist=Histories(windows()))
    pods = [f"llama-70b-instruct-predictor-00001-deployment-7f9c6d-{s}"
            for s in ("x2kq9", "b8zzm")]
    feed(st, [(0.0, "".join(exposition("kserve-inference", p, {"": (GiB, 10 * MiB)})
                            for p in pods))])
    lines = [t for t, _ in draw(st, 80, 24)]
    assert any(t.split()[0].endswith("x2kq9") for t in lines[2:4])
    assert any(t.split()[0].endswith("b8zzm") for t in lines[2:4])
    head = lines[1]
    for kept in ("TO LIMIT", "USED", "GROWTH", "KILL", "TOP GROWER"):
        assert kept in head, head
    assert "KV" not in head.split() and "ORPHANED" not in head
    wide = [t for t, _ in draw(st, 160, 50)][1]
    assert all(col.title in wide for col in COLUMNS)


def state() -> State:
    st = State("http://x", hist=Histories(windows()))
    reads = []
    for t in range(12):
        reads.append((float(t), exposition("llm", "alpha", {"": (GiB, 900 * MiB)})
                      + exposition("llm", "beta", {"": (GiB, 100 * MiB + t * 50 * MiB)})
                      + exposition("batch", "gamma", {"": (GiB, 10 * MiB)},
                                   {("c", "EngineCore"): 9 * MiB})
                      + 'headroom_tmpfs_used_bytes{namespace="batch",pod="gamma",'
                        'container="",mount="/dev/shm"} 1073741824\n'))
    feed(st, reads)
    return st


def names(st: State) -> list[str]:
    return [r.pod for r in sort_rows(st.rows, st.sort, st.filt)]


def test_keys_sort_filter_open_and_quit() -> None:
    st = state()
    assert names(st)[0] == "beta"  # growing: time to limit first
    for key, first in (("u", "alpha"), ("s", "gamma"), ("n", "gamma"), ("g", "beta")):
        assert handle_key(st, key)
        assert names(st)[0] == first, key
    for key in ("/", "b", "a", "t", "c", "h", "KEY_BACKSPACE", "KEY_BACKSPACE",
                "KEY_BACKSPACE", "KEY_BACKSPACE", "KEY_BACKSPACE", "b", "a", "\n"):
        handle_key(st, key)
    assert st.filt == "ba" and names(st) == ["gamma"]  # namespace "batch"
    handle_key(st, "\n")
    assert st.detail == ("batch", "gamma")
    lines = [text for text, _ in draw(st, 120, 20)]
    assert any("EngineCore" in ln for ln in lines)
    assert any("LIMIT" in ln and "GROWTH" in ln and "PROCESS" in ln for ln in lines)
    handle_key(st, "\x1b")
    assert st.detail is None
    handle_key(st, "\x1b")
    assert st.filt == "" and len(names(st)) == 3
    assert handle_key(st, "q") is False


def test_draw_fits_any_terminal() -> None:
    st = state()
    for width, height in ((20, 5), (80, 24), (200, 60), (1, 2)):
        lines = draw(st, width, height)
        assert len(lines) == height
        assert all(width_of(text) < max(width, 1) or not text for text, _ in lines)
    st.error = "URLError: refused"
    assert draw(st, 80, 10)[1] == ("error: URLError: refused", "bad")


def test_top_needs_a_terminal_and_a_url_with_a_scheme() -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "exporter.cli", "top", "--url", "http://x"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "needs a terminal" in r.stderr
    r = subprocess.run([sys.executable, "-m", "exporter.cli", "top", "--prometheus",
                        "prometheus:9090"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "the URL needs http://" in r.stderr


def test_escape_sequences_in_names_never_reach_the_terminal() -> None:
    evil = "a\x1b[2J\x07\\nb"  # raw ESC and BEL; the newline escaped, as exposition wants
    text = (f'headroom_memory_limit_bytes{{namespace="ns",pod="{evil}",container=""}} 10\n'
            f'headroom_memory_unreclaimable_bytes{{namespace="ns",pod="{evil}",container=""}} 5\n'
            f'headroom_process_memory_bytes{{namespace="ns",pod="{evil}",container="c",'
            f'process="{evil}",kind="rss_anon"}} 5\n')
    st = State("x")
    apply(st, Read(0.0, pods=parse(text)))
    st.detail = next(iter(st.procs))
    shown = [t for t, _ in draw(st, 100, 10)]
    st.detail = None
    shown += [t for t, _ in draw(st, 100, 10)]
    assert not any(ch in "".join(shown) for ch in "\x1b\x07\n")
    assert any("a?[2J??b" in t for t in shown)


def test_reader_reads_in_the_background_and_reports_errors() -> None:
    """A real HTTP server: one path serves the golden exposition, one hangs. The reader
    never blocks its caller; a hung or absent exporter is an error line, not a freeze."""
    import contextlib
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from exporter.oncall.top import Reader, local_reader

    body = GOLDEN.read_bytes()
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/hang":
                release.wait(30)  # hangs until the test has looked
            # The reader gave up on /hang long ago: its socket is closed.
            with contextlib.suppress(OSError):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    readers = [Reader(local_reader(f"{base}/metrics", base), 0.2),
               Reader(local_reader(f"{base}/hang", base), 0.2),
               Reader(local_reader("http://127.0.0.1:9/metrics", base), 0.2)]
    try:
        # Hung: nothing yet, and no wait (latest() waiting on the read would return the
        # read's error, not None: the server answers nothing until ``release``).
        assert readers[1].latest() is None
        deadline = time.monotonic() + 60
        got: list[Read | None] = [None, None, None]
        while time.monotonic() < deadline and (got[0] is None or got[2] is None):
            for i in (0, 2):
                got[i] = got[i] or readers[i].latest()
            time.sleep(0.05)
        st = State(base)
        assert got[0] is not None and got[2] is not None, got
        apply(st, got[0])
        assert ("llm-serving", "llama-70b-0") in st.procs and st.error == ""
        apply(st, got[2])
        assert "URLError" in st.error and st.procs  # the last good read stays on screen
    finally:
        release.set()
        for r in readers:
            r.stop()
        server.shutdown()
        server.server_close()


def test_the_mirror_names_the_rule_it_mirrors_step_by_step() -> None:
    """TOP_GROWER's mirror: the process that grows most unless a kind no process holds
    grows most; a falling cgroup still names its top kind (the rule records one on every
    binding cgroup; surfaces show it only while it grows). TIME_TO_LIMIT's: the soonest
    horizon; short and medium only beyond the peaks' envelope plus a window of the
    lasting trend."""
    g = fc.top_grower({"anon": 5.0, "dev_shm": 1.0}, {"EngineCore": 4.0, "Worker": -1.0})
    assert g == fc.Grower("anon", "EngineCore", 4.0)
    g = fc.top_grower({"anon": 1.0, "dev_shm": 5.0}, {"EngineCore": 4.0})
    assert g == fc.Grower("dev_shm", "", 5.0)
    # /dev/shm files are shmem and hidden too: one rate read three times names /dev/shm.
    g = fc.top_grower({"shmem": 2.0 + 1e-9, "hidden": 2.0, "dev_shm": 2.0}, {"a": 0.0})
    assert g == fc.Grower("dev_shm", "", 2.0)
    assert fc.top_grower({"anon": -3.0}, {"EngineCore": -1.0}) == fc.Grower("anon", "", -3.0)
    w = fc.Windows.of()
    # A tooth of a sawtooth below the peaks: no short or medium forecast.
    by_h = fc.time_to_limit_by_horizon(16.0, 8.0, 8.0, {"short": 1e-3, "medium": 1e-3},
                                       10.0, w)
    assert by_h == {} and fc.soonest(by_h) == (None, None)
    # Beyond them: the climb's forecast, the soonest.
    by_h = fc.time_to_limit_by_horizon(16.0, 12.0, 12.0, {"short": 1.0, "lasting": 1e-5},
                                       10.0, w)
    assert fc.soonest(by_h) == (4.0, "short")
    # No envelope yet (a young pod): any horizon.
    assert fc.soonest(fc.time_to_limit_by_horizon(16.0, 8.0, 8.0, {"medium": 2.0}, None,
                                                  w)) == (4.0, "medium")


def _leak_with_noise(swing: float, days: float = 3.0, rate: float = GiB / 86400,
                     base: float = 40 * GiB) -> list[tuple[float, float]]:
    """A leak sampled every minute whose figure swings ``swing`` from sample to sample."""
    return [(i * 60.0, base + rate * i * 60.0 + (swing / 2 if i % 2 else -swing / 2))
            for i in range(int(days * 86400 / 60))]


def test_the_peaks_noise_band_is_read_in_quiet_swings_net_of_the_trend() -> None:
    """PEAK_HEADROOM_SWINGS's mirror: the headroom above the peaks over the quiet hours'
    noise (four deviations from the hour's trend line), only with lasting growth."""
    w = fc.Windows.of()
    rate = GiB / 86400
    pts = _leak_with_noise(512 * MiB, rate=rate)
    now = pts[-1][0]
    peak = max(v for t, v in pts if t > now - 3600)
    limit = peak + 150 * MiB
    swings = fc.peak_headroom_swings(pts, now, w, limit)
    # The noise is the swing (the hour's leak is its trend, not noise): a swing of
    # +-256 MiB is a deviation of 256 MiB, an hour's swing four of them.
    assert swings == pytest.approx(150 / (4 * 256), rel=0.02)
    assert swings < fc.NOISE_BAND_SWINGS
    # The same peaks and noise without any growth: the same figure (a flat pod within
    # its noise of the limit is killed by its next excursion too).
    flat = [(t, v - rate * (t - now)) for t, v in pts]
    assert fc.peak_headroom_swings(flat, now, w, limit) == pytest.approx(
        (limit - max(v for t, v in flat if t > now - 3600)) / (4 * 256 * MiB), rel=0.02)
    # A sawtooth filling 4 GiB an hour with no noise: every hour's range is its
    # trend, there is no noise band (it pages on its envelope, not on one tooth).
    tooth = [(i * 60.0, 40 * GiB + (i % 120) * 4 * GiB / 60) for i in range(3 * 1440)]
    assert fc.peak_headroom_swings(tooth, now, w, 100 * GiB) is None


def test_a_weekly_pattern_is_no_lasting_growth_and_a_leak_is() -> None:
    """UNRECLAIMABLE_BASELINE_RISE's mirror: the floor rises from the week's highest
    floor where the peaks still reach it. Weekdays at 24 GiB, a weekend at 16 GiB, back
    over Monday: on Tuesday no lasting growth (the rules' promtool test
    ``weekly_pattern`` reads the same series); a leak's floor rises above every floor
    before it; after a restart the old floors are above the new peaks and the floor a
    day ago counts."""

    w = fc.Windows.of()
    day = 86400.0

    def weekly(t: float) -> float:
        d = t / day
        if d < 5:
            return 24 * GiB
        if d < 7:
            return 16 * GiB
        return 16 * GiB + 8 * GiB * min(1.0, d - 7)

    pts = [(i * 300.0, weekly(i * 300.0)) for i in range(int(8.5 * day / 300) + 1)]
    now = pts[-1][0]
    assert "lasting" not in growth(pts, now, w, 32 * GiB)
    # The same return with only the last two days read (as explain's fallback reads):
    # the floor a day ago is the weekend's, the return reads as growth.
    recent = [p for p in pts if p[0] > now - 2 * day - 3 * 3600]
    assert growth(recent, now, w, 32 * GiB)["lasting"] > 0
    # A leak: the floor a day ago is the highest before it.
    leak = [(t, 8 * GiB + t * GiB / day) for t, _ in pts]
    assert growth(leak, now, w, 32 * GiB)["lasting"] == pytest.approx(GiB / day, rel=0.01)
    # A leak restarted 3.5 days ago: the floors before the restart are above the new
    # peaks, so they are no pattern.
    restarted = [(t, 8 * GiB + (t - 5 * day if t >= 5 * day else t + 2 * day) * GiB / day)
                 for t, _ in pts]
    assert growth(restarted, now, w, 32 * GiB)["lasting"] == pytest.approx(GiB / day,
                                                                           rel=0.01)
    # A leak under the weekly pattern, read on Wednesday: the floor a day ago is
    # Monday's climb back, so the rise is from Friday's floor, four and a half days
    # old: the leak's rate, not four and a half times it (the promtool test reads the
    # same from the rules).
    wednesday = 9.5 * day
    under = [(t, weekly(t) + t * GiB / 2 / day) for t in
             (i * 300.0 for i in range(int(wednesday / 300) + 1))]
    assert floor_rise(under, wednesday, w, 32 * GiB) == pytest.approx(GiB / 2, rel=0.03)


def test_peaks_back_from_a_weekend_rise_over_the_age_of_last_weeks_highest() -> None:
    """HIGHEST_ENVELOPE_SINCE's mirror: weekdays at 24 GiB, a weekend at 16 GiB, back
    over Monday, under a 0.5 GiB-a-day leak (a 32 GiB limit), read on Tuesday. The floor
    a day ago is Monday's climb, below Friday's: no floor rise is read, and the peaks
    alone rose a day running above last week's highest (Friday's) by more than half the
    day's rise. That day's rise is the weekend's return (1.5 GiB at 04:00, 3.5 at 16:00:
    a ticket at 25-64 h to the limit, a week early); above Friday's peaks over the days
    since the envelope last held them (from Saturday), the rise is the leak's, read up
    to half again (the rules' promtool test ``weekly_pattern`` reads the same). A batch
    whose peaks grow each night is unchanged: last week's highest is last night's."""
    w = fc.Windows.of()
    day, leak, limit = 86400.0, GiB / 2, 32 * GiB

    def weekly(t: float) -> float:
        d = t / day
        level = 24 * GiB if d < 5 else 16 * GiB if d < 7 else 16 * GiB + 8 * GiB * min(
            1.0, d - 7)
        return level + leak * d

    for now in (8 * day + 4 * 3600, 8 * day + 16 * 3600):
        pts = [(t, weekly(t)) for t in (i * 300.0 for i in range(int(now / 300) + 1))]
        assert floor_rise(pts, now, w, limit) < 0
        rate = growth(pts, now, w, limit)["lasting"] * day
        assert leak <= rate <= 1.5 * leak, (now, rate / GiB)
        highest = week_peaks_since(pts, now, w)
        assert highest is not None
        peak, since = highest
        assert peak == pytest.approx(26.5 * GiB, rel=1e-3)  # Friday's
        assert since == pytest.approx(6 * day + 7200, abs=600)


def test_a_leak_that_outran_the_weekend_is_read_from_the_floor_before_its_fall() -> None:
    """FLOOR_RISE_PAST_FALL's mirror: weekdays at 24 GiB, a weekend at 16 GiB, back over
    Monday, under a 3 GiB-a-day leak (a 128 GiB limit), read on Wednesday at noon. The
    leak outran the weekend's drop: the floor a day ago (Monday's climb back, 42.0 GiB)
    is above Friday's (35.9) and is the week's highest, so the rise from it is 7.3 GiB,
    a day's leak and the rest of the weekend's drop. The whole floor five days ago
    (34.4) is one a later floor fell below (31.0, as the weekend began): from it, over
    five days, the leak's rate. Without the weekend the floors never fell: the rise is
    the day's."""
    w = fc.Windows.of()
    day, leak, limit = 86400.0, 3 * GiB, 128 * GiB

    def weekly(t: float) -> float:
        d = t / day
        level = 24 * GiB if d < 5 else 16 * GiB if d < 7 else 16 * GiB + 8 * GiB * min(
            1.0, d - 7)
        return level + leak * d

    now = 9.5 * day
    pts = [(t, weekly(t)) for t in (i * 300.0 for i in range(int(now / 300) + 1))]
    assert floor_rise_past_fall(pts, now, w, limit) == pytest.approx(leak, rel=0.01)
    assert floor_rise(pts, now, w, limit) == pytest.approx(leak, rel=0.01)
    assert growth(pts, now, w, limit)["lasting"] == pytest.approx(leak / day, rel=0.01)
    steady = [(t, 24 * GiB + leak * t / day) for t, _ in pts]
    assert floor_rise_past_fall(steady, now, w, limit) is None
    assert floor_rise(steady, now, w, limit) == pytest.approx(leak, rel=0.01)


def test_a_leak_fixed_in_place_reads_no_lasting_growth_until_the_peaks_before_it_leave(
) -> None:
    """FALLEN_FLOOR's mirror: a 2 GiB-a-day leak from 10 GiB under a daily swing of
    2 GiB (a 24 GiB limit), fixed in place after three days (back to 10 GiB, the swing
    goes on). Half an hour after the fix the memory has been below the floor before it
    (14 GiB, the day's trough) by more than the pattern's swing (1.2 GiB): that floor
    is held, and no lasting growth is read, though the envelope still holds the day's
    peaks and its rise (the rules before read the peaks' rise, 2 GiB a day, and paged
    on a pod back at half its limit). Once the envelope no longer holds a peak above
    that floor (a day on), it is not held. The leak unfixed has no fallen floor, and
    the troughs of the swing are no fall."""
    w = fc.Windows.of()
    day, limit, fixed = 86400.0, 24 * GiB, 3 * 86400.0

    def swing(t: float) -> float:
        return GiB * (1 - math.cos(2 * math.pi * t / day))

    def leak(t: float) -> float:
        return 10 * GiB + 2 * GiB * t / day + swing(t)

    def fixed_leak(t: float) -> float:
        return leak(t) if t < fixed else 10 * GiB + swing(t)

    def points(f: Callable[[float], float], now: float) -> list[tuple[float, float]]:
        return [(t, f(t)) for t in (i * 300.0 for i in range(int(now / 300) + 1))]

    before = points(fixed_leak, fixed - 300)
    assert fallen_floor(before, fixed - 300, w, limit) is None
    assert growth(before, fixed - 300, w, limit)["lasting"] == pytest.approx(
        2 * GiB / day, rel=0.05)
    for now in (fixed + 3600, fixed + 12 * 3600):
        pts = points(fixed_leak, now)
        assert fallen_floor(pts, now, w, limit) == pytest.approx(14 * GiB, rel=0.02)
        assert "lasting" not in growth(pts, now, w, limit)
    later = fixed + day + 3 * 3600
    assert fallen_floor(points(fixed_leak, later), later, w, limit) is None
    for now in (fixed + 3600, fixed + 12 * 3600):
        assert fallen_floor(points(leak, now), now, w, limit) is None


def test_a_nightly_batch_whose_peaks_grow_over_a_flat_floor_is_lasting_growth() -> None:
    """The lasting horizon's peaks-only rise: the rules' promtool test ``growing_batch``
    read by the mirror. A batch from 02:00 (15 minutes up, 25 at its peak) over a flat
    16 GiB floor, 2 GiB higher each night: 2 GiB a day of lasting growth, and two hours
    before the fifth batch the daily pattern binds within two hours; the fourth
    batch's climb is the pattern (the medium horizon does not bind), and its plateau no
    climb at all. The same batch at one level every night, or a single higher night, is
    no growth."""
    day, limit, floor = 86400.0, 29 * GiB, 16 * GiB

    def batch(peaks: Callable[[int], float]) -> list[tuple[float, float]]:
        def at(t: float) -> float:
            k, s = int(t // day), t % day - 2 * 3600
            up = min(1.0, max(0.0, (s + 300) / 1200)) if s < 2400 else 0.0
            return floor + (peaks(k) - floor) * up
        return [(i * 300.0, at(i * 300.0)) for i in range(int(4.5 * day / 300))]

    growing = batch(lambda k: (22 + 2 * k) * GiB)

    def forecast(pts: list[tuple[float, float]], now: float) -> fc.Forecast:
        f = fc.local_forecast(fc.History("ns", "p", "vllm", limit,
                                         [p for p in pts if p[0] <= now]), now)
        assert f is not None
        return f

    before = forecast(growing, 4 * day + 30 * 60)
    assert before.growth["lasting"] == pytest.approx(2 * GiB / day, rel=0.01)
    assert before.horizon == "lasting" and before.time_to_limit == 7200
    # What grows is in the peaks (the hour before the batch is the flat floor on both
    # days): EngineCore's anon memory, 2 GiB a day, not the API server's.
    now = 4 * day + 30 * 60
    seen = [p for p in growing if p[0] <= now]
    named = fc.local_forecast(fc.History(
        "ns", "p", "vllm", limit, seen,
        kinds={KIND_ANON: [(t, v - 4 * GiB) for t, v in seen]},
        processes={"EngineCore": [(t, v - 6 * GiB) for t, v in seen],
                   "APIServer": [(t, 2.0 * GiB) for t, _ in seen]}), now)
    assert named is not None and named.grower is not None
    assert (named.grower.kind, named.grower.process) == (KIND_ANON, "EngineCore")
    assert named.grower.rate == pytest.approx(2 * GiB / day, rel=0.01)
    # The rules ask "no floor rises" of every cgroup of the pod: where the pod-level
    # cgroup's floor rises (a charge of its own, 1 GiB a day, under a looser limit), the
    # container, which still binds, reads the day-over-day means (the flat hour before
    # the batch), not its peaks.
    container = fc.History("ns", "p", "vllm", limit, seen,
                           kinds={KIND_ANON: [(t, v - 4 * GiB) for t, v in seen]},
                           processes={"EngineCore": [(t, v - 6 * GiB) for t, v in seen]})
    pod = fc.History("ns", "p", "", 48 * GiB, [(t, v + GiB * t / day) for t, v in seen])
    alone = fc.pod_forecasts([container], now)[0]
    assert alone.grower is not None and alone.grower.rate == pytest.approx(2 * GiB / day,
                                                                          rel=0.01)
    both = {f.container: f for f in fc.pod_forecasts([container, pod], now)}
    assert both["vllm"].binding and not both[""].binding
    assert both["vllm"].horizon == "lasting"
    peaks_rate = 2 * GiB / day
    assert both["vllm"].grower is None or both["vllm"].grower.rate < 0.1 * peaks_rate, (
        both["vllm"].grower)
    # The fourth batch's last new high (its ramp ended at 02:15): the medium horizon
    # reads it, and the lasting one still binds. On its plateau no medium counts.
    fourth = forecast(growing, 3 * day + 2 * 3600 + 29 * 60)
    assert "medium" in fourth.growth and fourth.horizon == "lasting", fourth
    held = forecast(growing, 3 * day + 2 * 3600 + 35 * 60)
    assert "medium" not in held.growth and held.horizon == "lasting", held
    assert "lasting" not in forecast(batch(lambda k: 26 * GiB), 4 * day).growth
    once = batch(lambda k: (28 if k == 3 else 22) * GiB)
    assert "lasting" not in forecast(once, 4 * day).growth


def test_a_young_pod_has_a_lasting_horizon_once_it_lived_part_of_the_day_before() -> None:
    """A pod 1.5 days old: the floor's rise over the part of the day before it lived past
    its warm-up, scaled to a day. A leak reads its rate; a daily swing, a model loading
    from nothing, and steps every few hours read what they are; under 6 h of that part,
    nothing."""

    w = fc.Windows.of()
    day, hour = 86400.0, 3600.0

    def series(fn: Callable[[float], float], age: float) -> list[tuple[float, float]]:
        return [(i * 60.0, fn(i * 60.0)) for i in range(int(age / 60) + 1)]

    def loaded(fn: Callable[[float], float]) -> Callable[[float], float]:
        # 20 minutes of loading from 1 GiB, then the shape.
        return lambda t: GiB + (fn(t) - GiB) * min(1.0, t / 1200)

    leak = series(loaded(lambda t: 8 * GiB + t * GiB / day), 1.5 * day)
    assert growth(leak, leak[-1][0], w, 32 * GiB)["lasting"] == pytest.approx(
        GiB / day, rel=0.02)
    young = series(loaded(lambda t: 8 * GiB + t * GiB / day), day + 6 * hour)
    assert "lasting" not in growth(young, young[-1][0], w, 32 * GiB)
    swing = series(loaded(lambda t: 8 * GiB + 4 * GiB * math.sin(2 * math.pi * t / day)),
                   1.5 * day)
    assert "lasting" not in growth(swing, swing[-1][0], w, 32 * GiB)
    stairs = series(loaded(lambda t: 8 * GiB + GiB * (t // (3 * hour))), 1.5 * day)
    assert growth(stairs, stairs[-1][0], w, 32 * GiB)["lasting"] == pytest.approx(
        8 * GiB / day, rel=0.2)


def test_a_leak_that_speeds_up_climbs_beyond_the_pattern_and_a_steady_one_does_not() -> None:
    """ABOVE_PATTERN's mirror: the lasting rate is the day's average, so a leak whose
    excess doubles every 18 h sits far above the same hours a day ago plus a day of that
    rate, and its short and medium horizons count (they read the rate now); a steady leak
    under a daily swing climbs no more than its trend above yesterday's hours, and the
    swing's climb is not beyond the pattern."""

    w = fc.Windows.of()
    day, hour, limit = 86400.0, 3600.0, 32 * GiB

    def series(fn: Callable[[float], float], age: float) -> list[tuple[float, float]]:
        return [(i * 60.0, fn(i * 60.0)) for i in range(int(age / 60) + 1)]

    def read(pts: list[tuple[float, float]]) -> tuple[bool, dict[str, float]]:
        now = pts[-1][0]
        rates = growth(pts, now, w, limit)
        ttl = fc.time_to_limit_by_horizon(
            limit, pts[-1][1], highest(pts, now - w.peak, now) or 0.0, rates,
            envelope(pts, now, w), w, None, pts, now)
        return above_pattern(pts, now, w, limit, rates.get("lasting")), ttl

    # Doubling every 18 h from 14 GiB to the limit in two days, read an hour before:
    # the lasting horizon (the day's average) says hours, the medium one an hour.
    tau = 18 * hour / math.log(2)
    scale = 18 * GiB / (math.exp(2 * day / tau) - 1)
    speeding = series(lambda t: 14 * GiB + scale * (math.exp(t / tau) - 1), 2 * day - hour)
    beyond, ttl = read(speeding)
    assert beyond and ttl["lasting"] > 3 * hour and ttl["medium"] < 75 * 60
    # The same two and a half days at the average rate of the last day: lasting alone.
    steady = series(lambda t: 12 * GiB + 3 * GiB * t / day
                    + 3 * GiB * math.sin(2 * math.pi * (t / day - 0.5 + 2 / 24)), 2.5 * day)
    beyond, ttl = read(steady)
    assert not beyond and set(ttl) == {"lasting"}


def test_a_young_leak_under_a_daily_swing_is_forecast_at_the_rise_above_yesterday() -> None:
    """PATTERN_PEAK's mirror: a leak of 5 GiB a day that began 1.3 days ago under a 3 GiB
    daily swing. The lasting rate compares the day with the day before, which holds
    pre-leak hours, and reads a fifth less; the last three hours each rose 5 GiB above
    the same hours yesterday. The crest 1.5 h ahead tops the limit: the pattern says so
    within 2 h, where yesterday's crest lifted by the lasting rate stays below it."""

    w = fc.Windows.of()
    day, hour = 86400.0, 3600.0
    start, rate = 1.9 * day, 5 * GiB / day

    def leak_under_swing(t: float) -> float:
        return (12 * GiB + 3 * GiB * math.sin(2 * math.pi * t / day)
                + rate * max(0.0, t - start))

    crest = 3.25 * day
    now = crest - 1.5 * hour
    pts = [(i * 60.0, leak_under_swing(i * 60.0)) for i in range(int(now / 60) + 1)]
    limit = leak_under_swing(crest) - 0.1 * GiB
    lasting = growth(pts, now, w, limit)["lasting"]
    assert lasting * day < 0.9 * rate * day
    assert recent_pattern_rise(pts, now, w) == pytest.approx(rate * day, rel=0.01)
    assert pattern_time_to_limit(pts, now, w, limit, lasting) == 2 * hour
    # Yesterday's hours ahead at the lasting rate alone stay below the limit.
    yesterday = highest(pts, now - day - 3 * w.lasting_interval, now - day + 6 * hour)
    assert yesterday is not None and yesterday + lasting * day < limit


def test_a_rise_that_ramps_lifts_the_pattern_uncapped_and_a_step_a_day_old_stays_capped(
) -> None:
    """PATTERN_LIFT's mirror, at a lasting rate that lags (a third of the leak's: the
    rules read 13 % a day on a leak of 39 %). A leak of 12 GiB a day that began 1.2 days
    ago under a daily swing rises above yesterday's hours more every hour: the lift is
    the rise now, and the hours ahead cross the limit, which yesterday's hours lifted
    by the cap (two days of the lagging rate) do not. A step of 8 GiB 21 h ago over a
    slow leak lifted the recent hours at once and its rise stands still: the hours
    ahead a day ago already hold it (its anniversary is 3 h ahead), so the lift stays
    capped and the step is not counted twice."""

    w = fc.Windows.of()
    day, hour = 86400.0, 3600.0

    def at(fn: Callable[[float], float], now: float) -> list[tuple[float, float]]:
        return [(i * 60.0, fn(i * 60.0)) for i in range(int(now / 60) + 1)]

    def ahead_of(pts: list[tuple[float, float]], now: float, hours: float) -> float:
        # The pattern's window of that many hours: yesterday's highest figure there.
        top = highest(pts, now - day - 3 * w.lasting_interval, now - day + hours * hour)
        assert top is not None
        return top

    start, rate = 2.0 * day, 12 * GiB / day

    def leak(t: float) -> float:
        return (18 * GiB + 4 * GiB * math.sin(2 * math.pi * t / day)
                + rate * max(0.0, t - start))

    now = start + 1.2 * day
    pts = at(leak, now)
    lagging = rate / 3
    rise_now = pattern_rise(pts, now, w)
    assert rise_now is not None and rise_now > 2 * lagging * day
    limit = ahead_of(pts, now, 3) + 0.8 * rise_now  # past the capped lift, not the rise
    assert ahead_of(pts, now, 6) + 2 * lagging * day < limit
    ttl = pattern_time_to_limit(pts, now, w, limit, lagging)
    assert ttl is not None and ttl <= 3 * hour

    stepped_at, slow = 3.0 * day, 0.5 * GiB / day

    def step(t: float) -> float:
        return 22 * GiB + slow * t + (8 * GiB if t >= stepped_at else 0.0)

    now = stepped_at + 21 * hour
    pts = at(step, now)
    rise_now = pattern_rise(pts, now, w)
    assert rise_now is not None and rise_now > 8 * GiB
    limit = ahead_of(pts, now, 6) + 0.5 * rise_now  # the step twice would cross
    assert ahead_of(pts, now, 6) + 2 * slow * day < limit
    assert pattern_time_to_limit(pts, now, w, limit, slow) is None


def test_a_step_followed_by_a_leak_lifts_the_pattern_by_the_leak_alone() -> None:
    """reload-then-leak seed 24: a reload lifts the level by a quarter of the limit 22 h
    into the pod's life and a leak of 20 % of the limit a day begins with it; the
    lasting rate still reads almost nothing. 23 h later the hours just past rose above
    the same hours a day ago by the step and nearly a day of the leak, and that rise
    ramps (20 h ago it was the step and a few hours of the leak). The hours ahead a day
    ago already hold the step, so the lift is a period of the rise's own growth, the
    leak's: the step counted twice would put the limit within 6 h."""

    w = fc.Windows.of()
    day, hour, limit = 86400.0, 3600.0, 30 * GiB
    stepped_at, step, rate = 22 * hour, 0.25 * limit, 0.2 * limit / day

    def reload_then_leak(t: float) -> float:
        after = t - stepped_at
        return 0.4 * limit + (step + rate * after if after >= 0 else 0.0)

    now = stepped_at + 23 * hour
    pts = [(i * 60.0, reload_then_leak(i * 60.0)) for i in range(int(now / 60) + 1)]
    recent = recent_pattern_rise(pts, now, w)
    before = greatest_recent_pattern_rise(pts, now - w.pattern_ramp, w)
    rise_now = pattern_rise(pts, now, w)
    assert recent is not None and before is not None and rise_now is not None
    assert before > step and (1 - w.pattern_ramp_share) * recent > before  # it ramps
    growth = ramp_growth(pts, now, w)
    assert growth is not None and abs(growth - rate * day) < 0.1 * rate * day
    slow = 0.005 * limit / day  # the lasting rate: it lags the leak
    yesterday = highest(pts, now - day - 3 * w.lasting_interval, now - day + 6 * hour)
    assert yesterday is not None and yesterday >= 0.4 * limit + step  # it holds the step
    # Above the hours ahead a day ago lifted by a period of the leak, and below the same
    # lifted by the rise now (the step again).
    over = yesterday + 1.1 * rate * day
    assert over < yesterday + rise_now
    assert pattern_time_to_limit(pts, now, w, over, slow) is None


def test_a_rise_that_ramps_under_teeth_leaves_the_lift_capped() -> None:
    """Teeth that drift through the day rise and fall against the same hours a day ago
    by most of their height, and once read as a ramp (sawtooth seed 4, 23 h before its
    kill: its pattern put the limit within the hour). Where the pattern has teeth the
    daily pattern's lift stays capped even where the rise does ramp: teeth every 4 h, a
    tenth of the limit high, with a leak of 12 GiB a day that began 1.1 days ago (the
    lasting rate lags it, a third). The hours ahead a day ago lifted by the rise now
    would cross the limit; lifted by the cap they do not. The envelope's forecast, which
    carries the tallest tooth on, is the one that reads teeth."""

    w = fc.Windows.of()
    day, hour, limit = 86400.0, 3600.0, 40 * GiB
    period, height, rate = 4 * hour, 0.1 * limit, 12 * GiB / day
    start = 2.0 * day
    now = start + 1.1 * day

    def saw(t: float) -> float:
        phase = (t % period) / period
        tooth = phase / 0.7 if phase < 0.7 else 0.0  # fills 70 % of the period, then flushed
        return 14 * GiB + height * tooth + rate * max(0.0, t - start)

    pts = [(i * 60.0, saw(i * 60.0)) for i in range(int(now / 60) + 1)]
    recent = recent_pattern_rise(pts, now, w)
    before = greatest_recent_pattern_rise(pts, now - w.pattern_ramp, w)
    rise_now = pattern_rise(pts, now, w)
    assert recent is not None and before is not None and rise_now is not None
    assert (1 - w.pattern_ramp_share) * recent > before  # the rise ramps
    assert teeth(pts, now, w, limit)
    lagging = rate / 3
    yesterday = highest(pts, now - day - 3 * w.lasting_interval, now - day + 6 * hour)
    assert yesterday is not None
    limit_between = yesterday + (2 * lagging * day + rise_now) / 2
    assert yesterday + 2 * lagging * day < limit_between < yesterday + rise_now
    assert pattern_time_to_limit(pts, now, w, limit_between, lagging) is None


def test_a_row_whose_peaks_are_in_the_noise_band_says_so_and_sorts_first() -> None:
    """The page fires on the noise band whatever the trend's hours say: top shows
    "in noise" under TO LIMIT, styles it and sorts it above a sooner time to limit."""
    noisy = fc.Forecast("llm", "slow", "vllm", 80 * GiB, 79.9 * GiB, True,
                        {"lasting": 1e4}, 79.9 * GiB, 4 * 3600.0, "lasting",
                        peak_swings=0.35)
    soon = fc.Forecast("llm", "fast", "vllm", 80 * GiB, 60 * GiB, True, {"short": 1e6},
                       None, 3600.0, "short", peak_swings=None)
    calm = dataclasses.replace(noisy, pod="calm", peak_swings=0.6)
    rows = [row_of(f) for f in (soon, noisy, calm)]
    to_limit = next(c for c in COLUMNS if c.title == "TO LIMIT")
    assert [to_limit.value(r, 0.0) for r in rows] == ["60 min", "in noise", "4.0 h"]
    assert [r.pod for r in sort_rows(rows, "t")] == ["slow", "fast", "calm"]


def test_a_tooth_within_the_teeths_spread_is_the_pattern_unless_a_swing_leaks() -> None:
    """CLIMB_BEYOND_PATTERN's teeth margin, mirrored: teeth of 8 GiB every 4 h, the last
    one 10 GiB and 95 % up, 1.5 GiB above every peak of the day. Flushed at once (teeth:
    TEETH), that is within 30 % of the teeth's height over a flat floor or one that rises
    2 GiB a day: the pattern, no short or medium forecast. Falling over two hours (a
    swing, no sharp release) over that rising floor, the margin is the peaks' own 1 % of
    the limit and the climb is beyond the pattern."""

    w = fc.Windows.of()
    day, period, limit = 86400.0, 4 * 3600.0, 32 * GiB

    def forecast(leak: float, fall: float) -> dict[str, float]:
        climb = period - fall
        now = 3 * day + 0.95 * climb

        def tooth(t: float) -> float:
            height = 10 * GiB if t // period == now // period else 8 * GiB
            into = t % period
            return height * (into / climb if into < climb else 1 - (into - climb) / fall)

        pts = [(t, 14 * GiB + leak * t / day + tooth(t))
               for t in (i * 60.0 for i in range(int(now / 60) + 1))]
        rates = growth(pts, now, w, limit)
        return fc.time_to_limit_by_horizon(
            limit, pts[-1][1], highest(pts, now - w.peak, now) or 0.0, rates,
            envelope(pts, now, w), w, None, pts, now)

    assert not {"short", "medium"} & set(forecast(0.0, 60.0))
    assert not {"short", "medium"} & set(forecast(2 * GiB, 60.0))
    assert {"short", "medium"} & set(forecast(2 * GiB, 2 * 3600.0))


def test_a_tooth_within_what_irregular_teeth_make_is_the_pattern_not_after_equal_ones(
        ) -> None:
    """TOOTH_CREST, mirrored: teeth every 6 h over a flat floor, flushed at once, the
    last one 13 GiB and 95 % up, 3.35 GiB above every peak of the day (more than 30 % of
    the tallest tooth's height). Where the day's teeth were 5, 9, 6 and 8 GiB, the
    tallest tooth four falls that irregular make is 9 + 4 / 3 GiB, and two more of that
    share of their range put the ceiling at 13 GiB over the last release's base: the
    pattern, no short or medium forecast. Where they were 9 GiB each, the tallest is 9
    GiB and the climb is beyond the pattern."""

    w = fc.Windows.of()
    day, period, limit = 86400.0, 6 * 3600.0, 40 * GiB
    now = 3 * day + 0.95 * 0.3 * period

    def forecast(heights_gib: tuple[float, ...]) -> dict[str, float]:
        def tooth(t: float) -> float:
            n = int(t // period)
            height = 13 * GiB if n == int(now // period) else heights_gib[n % 4] * GiB
            into = (t % period) / (0.3 * period)  # fills 30 % of the period, then flat
            return height * min(1.0, into)

        pts = [(t, 14 * GiB + tooth(t)) for t in (i * 60.0 for i in range(int(now / 60) + 1))]
        assert teeth(pts, now, w, limit)
        rates = growth(pts, now, w, limit)
        assert {"short", "medium"} & set(rates)  # the tooth climbs
        return fc.time_to_limit_by_horizon(
            limit, pts[-1][1], highest(pts, now - w.peak, now) or 0.0, rates,
            envelope(pts, now, w), w, None, pts, now)

    assert not {"short", "medium"} & set(forecast((5.0, 9.0, 6.0, 8.0)))
    assert {"short", "medium"} & set(forecast((9.0, 9.0, 9.0, 9.0)))


def test_a_climb_back_from_the_weekend_is_read_against_last_weeks_peaks() -> None:
    """HIGHEST_ENVELOPE's cap on the ceiling, mirrored: weekdays at 20 GiB swinging 6 GiB
    to a 15:00 crest, weekends 3 GiB lower (Monday's trough is a release below Sunday's
    crest), read on the second Monday at noon, climbing back. Flat, the climb is below
    last week's crest: the pattern. Over a leak of 0.6 GiB a day it stands 0.85 GiB above
    Friday's crest and beyond the pattern, though the day's envelope has passed that crest
    an hour ago and its ceiling (a share of the weekend's fall and the envelope's own rise
    above it) rides the climb."""
    w = fc.Windows.of()
    day, hour, limit = 86400.0, 3600.0, 40 * GiB
    now = 7 * day + 12 * hour

    def forecast(leak_per_day: float) -> dict[str, float]:
        def u(t: float) -> float:
            d = t / day % 7
            weekend = min(1.0, (d - 5) * 8) if d >= 5 else max(0.0, 1 - d * 8) if t > day else 0
            swing = 6 * GiB * (0.5 + 0.5 * math.cos(2 * math.pi * (t % day / hour - 15) / 24))
            return 20 * GiB - 3 * GiB * weekend + swing + leak_per_day * t / day

        pts = [(t, u(t)) for t in (i * 60.0 for i in range(int(now / 60) + 1))]
        rates = growth(pts, now, w, limit)
        assert {"short", "medium"} & set(rates)  # the climb back
        return fc.time_to_limit_by_horizon(
            limit, pts[-1][1], highest(pts, now - w.peak, now) or 0.0, rates,
            envelope(pts, now, w), w, None, pts, now)

    assert not {"short", "medium"} & set(forecast(0.0))
    assert {"short", "medium"} & set(forecast(0.6 * GiB))
