"""``headroom top``'s pure model: an exposition -> pods, growth from successive reads,
sorting, filtering, the keys and the lines drawn. (The real terminal is in
``tests/test_oncall_real.py``: tmux against a real exporter.)"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.oncall.top import Pod, Proc, Rates, State, draw, handle_key, parse, rows

GOLDEN = Path(__file__).parent / "golden" / "v1-cgroupfs-containerd-gpu-vllm.prom"
MiB, GiB = 1 << 20, 1 << 30


def test_parse_a_real_exposition() -> None:
    """The golden exposition (fixture host tree, the exporter's real renderer)."""
    pods = parse(GOLDEN.read_text())
    llama = pods[("llm-serving", "llama-70b-0")]
    assert llama.limit == 40 * GiB  # the pod-level cgroup's, not a container's
    assert llama.shm == 2684354560
    assert llama.kv_usage is not None and 0 <= llama.kv_usage <= 1
    top = llama.top_process
    assert top is not None and top.process.startswith(("Worker", "EngineCore", "APIServer"))
    assert all(p.pod for p in pods.values())


def test_a_pod_without_pod_level_series_shows_its_largest_container() -> None:
    text = "\n".join([
        'headroom_memory_limit_bytes{namespace="a",pod="p",container="small"} 100',
        'headroom_memory_unreclaimable_bytes{namespace="a",pod="p",container="small"} 10',
        'headroom_memory_limit_bytes{namespace="a",pod="p",container="big"} 200',
        'headroom_memory_unreclaimable_bytes{namespace="a",pod="p",container="big"} 150',
        'headroom_process_memory_bytes{namespace="a",pod="p",container="big",'
        'process="EngineCore",kind="rss_anon"} 140',
        'headroom_process_memory_bytes{namespace="a",pod="p",container="big",'
        'process="EngineCore",kind="rss_shmem"} 5',
        'headroom_processes{namespace="a",pod="p",container="big",process="EngineCore"} 1',
        "",
    ])
    p = parse(text)[("a", "p")]
    assert (p.limit, p.unreclaimable) == (200, 150)
    assert p.processes == (Proc("big", "EngineCore", 140, 5, 0, 1),)


def pod(name: str, unrecl: float, limit: float = GiB, ns: str = "llm") -> Pod:
    return Pod(ns, name, limit, unrecl, unrecl, None, None)


def test_growth_and_time_to_limit_from_successive_reads() -> None:
    rates = Rates(window=30)
    for t in range(0, 11):
        rates.observe(float(t), {("llm", "a"): pod("a", 100 * MiB + t * 2 * MiB),
                                 ("llm", "b"): pod("b", 500 * MiB)})
    ra = rates.rate(("llm", "a"))
    assert ra == pytest.approx(2 * MiB)
    assert rates.rate(("llm", "b")) == pytest.approx(0)
    r = rows([pod("a", 120 * MiB), pod("b", 500 * MiB)], rates)
    assert [x.pod.pod for x in r] == ["a", "b"]  # the only one growing sorts first
    assert r[0].ttl == pytest.approx((GiB - 120 * MiB) / (2 * MiB))
    # Old reads leave the window; a pod that is gone is forgotten.
    rates.observe(100.0, {("llm", "b"): pod("b", 500 * MiB)})
    assert rates.rate(("llm", "a")) is None and ("llm", "a") not in rates.history


def test_one_read_is_no_rate() -> None:
    rates = Rates()
    rates.observe(0.0, {("llm", "a"): pod("a", MiB)})
    assert rates.rate(("llm", "a")) is None


def state() -> State:
    st = State("http://x")
    st.pods = {p.key: p for p in (pod("alpha", 900 * MiB), pod("beta", 100 * MiB),
                                  replace(pod("gamma", 10 * MiB, ns="batch"), shm=GiB,
                                          processes=(Proc("c", "EngineCore", 9 * MiB),)))}
    for t in range(5):
        st.rates.observe(float(t), {k: replace(v, unreclaimable=(v.unreclaimable or 0)
                                               + t * MiB * (k[1] == "beta"))
                                    for k, v in st.pods.items()})
    return st


def names(st: State) -> list[str]:
    return [x.pod.pod for x in rows(st.pods.values(), st.rates, st.sort, st.filt)]


def test_keys_sort_filter_open_and_quit() -> None:
    st = state()
    assert names(st)[0] == "beta"  # growing: time to limit first
    # n: by namespace, then pod (batch/gamma before llm/alpha)
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
        assert all(len(text) < max(width, 1) or not text for text, _ in lines)
    st.error = "URLError: refused"
    assert draw(st, 80, 10)[1] == ("error: URLError: refused", "bad")


def test_top_needs_a_terminal() -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "exporter.cli", "top", "--url", "http://x"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "needs a terminal" in r.stderr


def test_escape_sequences_in_names_never_reach_the_terminal() -> None:
    evil = "a\x1b[2J\x07\\nb"  # raw ESC and BEL; the newline escaped, as exposition wants
    text = (f'headroom_memory_limit_bytes{{namespace="ns",pod="{evil}",container=""}} 10\n'
            f'headroom_memory_unreclaimable_bytes{{namespace="ns",pod="{evil}",container=""}} 5\n'
            f'headroom_process_memory_bytes{{namespace="ns",pod="{evil}",container="c",'
            f'process="{evil}",kind="rss_anon"}} 5\n')
    st = State("x")
    st.pods = parse(text)
    st.detail = next(iter(st.pods))
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

    from exporter.oncall.top import Read, Reader, apply

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
    readers = [Reader(f"{base}/metrics", 0.2), Reader(f"{base}/hang", 0.2),
               Reader("http://127.0.0.1:9/metrics", 0.2)]
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
        assert ("llm-serving", "llama-70b-0") in st.pods and st.error == ""
        apply(st, got[2])
        assert "URLError" in st.error and st.pods  # the last good read stays on screen
    finally:
        release.set()
        for r in readers:
            r.stop()
        server.shutdown()
        server.server_close()
