"""Scrape cost of ``headroom serve`` on a synthetic node (a benchmark, not a test).

    python3 -m benchmarks.scrape_cost [--containers 100] [--processes 500] [--scrapes 200]
    python3 -m benchmarks.scrape_cost --idle 20 [--repeat 5]     # idle cost only
    python3 -m benchmarks.scrape_cost --containers 102 --processes 500 [--every 15]
                                          # the node of the side-by-side figure: 34 pods

(from the repository root: it builds the node with the kernel tier's cgroup helpers,
``tests/helpers/kernel.py``).

Builds a real node shape on this kernel: memory cgroups beneath this process's own cgroup,
shaped like a kubelet's cgroupfs tree (pods with 3 containers each, plus pod-level
cgroups), with real processes (``sleep``) spread over the containers. Then it starts the
real exporter on it and measures:

- CPU time per scrape: the exporter's utime+stime over N sequential scrapes, minus what
  the background sampler used in the same wall time (measured separately, idle);
- /metrics latency p50 / p99 (client side, loopback);
- the exporter's RSS after the scrapes (and its high-water mark);
- the sampler's idle CPU (no scrapes), and the cost in all at a scrape every
  ``--every`` seconds (idle CPU plus CPU per scrape over the interval).

``--shm-pods K`` adds K pods with a private /dev/shm (a mount namespace, as a container
has) holding two 1 MiB files: one held open by the pod's process, one orphaned, so the
stale /dev/shm check must look at every process of those pods (descriptors, then
mappings).
``--orphans-interval 1ms`` makes it rescan on every scrape (its worst case; by default a
pod is rescanned only when its tmpfs usage or processes change, or every 60 s).
``--idle SECONDS`` measures only the exporter's idle CPU (after one warm-up scrape, no
scrapes at all: the sampler, discovery between scrapes, the kill watch), ``--repeat`` times,
and prints each run, the busiest threads (``main`` is the event loop) and the median: on a
shared machine the median of several windows is the figure to compare.
Needs root and a writable cgroup v1 memory controller (this machine's); prints a table.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from exporter.oom.members import RSS_REFRESH
from tests.helpers.kernel import kube_tree
from tests.helpers.net import free_port

TICK = os.sysconf("SC_CLK_TCK")
SETTLE = RSS_REFRESH + 1  # seconds after the warm-up before the idle figure


def cpu_split(pid: int) -> tuple[float, float]:
    return cpu_split_at(Path(f"/proc/{pid}/stat"))  # utime, stime


def cpu_seconds(pid: int) -> float:
    return sum(cpu_split(pid))


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds per thread (the main thread's id is the pid: the event loop)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = sum(cpu_split_at(task / "stat"))
        except (OSError, ValueError):
            continue  # a thread that ended
    return out


def busiest(before: dict[int, float], after: dict[int, float], wall: float,
            ) -> list[tuple[float, int]]:
    """(share of a core, thread id), busiest first."""
    return sorted(((after[t] - before.get(t, 0.0)) / wall, t) for t in after)[::-1]


def shares(top: list[tuple[float, int]], pid: int) -> str:
    return ", ".join(f"{'main' if t == pid else t} {share * 100:.2f}%" for share, t in top[:4])


def cpu_split_at(stat: Path) -> tuple[float, float]:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def rss(pid: int) -> tuple[int, int]:
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(status["VmRSS"].split()[0]) << 10, int(status["VmHWM"].split()[0]) << 10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--containers", type=int, default=100)
    ap.add_argument("--processes", type=int, default=500)
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--sampler-interval", default="200ms")
    ap.add_argument("--shm-pods", type=int, default=0)
    ap.add_argument("--shm-pod-processes", type=int, default=10)
    ap.add_argument("--orphans-interval", default="60s")
    ap.add_argument("--idle", type=float, default=0.0,
                    help="measure only idle CPU over windows of this many seconds")
    ap.add_argument("--repeat", type=int, default=5, help="idle windows (with --idle)")
    ap.add_argument("--every", type=float, default=15.0,
                    help="Prometheus's scrape interval, for the cost in all")
    args = ap.parse_args()

    sleepers: list[subprocess.Popen[bytes]] = []
    with kube_tree() as tree:
        containers: list[str] = []
        while len(containers) < args.containers:
            _, pod = tree.pod(qos=("burstable", "besteffort", "guaranteed")[len(containers) % 3],
                              limit=8 << 30)
            for _ in range(min(3, args.containers - len(containers))):
                containers.append(tree.container(pod)[1])
        for i in range(args.processes):
            procs = tree.hierarchy.dir(containers[i % len(containers)]) / "cgroup.procs"

            def enter(procs: Path = procs) -> None:
                procs.write_text(str(os.getpid()))

            sleepers.append(subprocess.Popen(["sleep", "3600"], preexec_fn=enter))
        # pods with a private /dev/shm: one file held open (fd 3 survives exec), one not
        shm_script = ("mount -t tmpfs -o size=64m tmpfs /dev/shm && "
                      "head -c 1048576 /dev/zero > /dev/shm/held && "
                      "head -c 1048576 /dev/zero > /dev/shm/orphan && "
                      "exec 3</dev/shm/held && exec sleep 3600")
        for _ in range(args.shm_pods):  # pods of their own: one mount namespace per pod
            _, pod = tree.pod(qos="burstable", limit=1 << 30)
            procs = tree.hierarchy.dir(tree.container(pod)[1]) / "cgroup.procs"

            def enter_pod(procs: Path = procs) -> None:
                procs.write_text(str(os.getpid()))

            sleepers.append(subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", shm_script],
                preexec_fn=enter_pod))
            for _ in range(args.shm_pod_processes - 1):  # the rest of the pod's processes
                sleepers.append(subprocess.Popen(["sleep", "3600"], preexec_fn=enter_pod))
        port = free_port()
        exporter = subprocess.Popen(
            [sys.executable, "-m", "exporter.cli", "serve",
             f"--web.listen-address=127.0.0.1:{port}",
             f"--cgroup.kubepods-path={tree.kubepods}", "--no-collector.kubernetes",
             "--cgroup.host-vllm=false",  # nothing from the host's /proc
             "--no-collector.nvml", "--no-collector.vllm",
             f"--sampler.interval={args.sampler_interval}",
             f"--tmpfs.orphans-interval={args.orphans_interval}"],
        )
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            for _ in range(200):
                try:
                    urllib.request.urlopen(url, timeout=5).read()
                    break
                except OSError:
                    time.sleep(0.05)
            for _ in range(1 if args.idle else 5):  # warm-up: imports, caches, PSS reads
                urllib.request.urlopen(url, timeout=10).read()
            if args.idle:
                idle_report(exporter.pid, args)
                return

            # The sampler's own cost, idle, to subtract from the scrape loop: once the
            # start-up work is done (every member's name, then its first RSS re-read).
            time.sleep(SETTLE)
            c0, t0 = cpu_seconds(exporter.pid), time.monotonic()
            threads0 = thread_cpu(exporter.pid)
            time.sleep(10)
            idle_cpu_per_s = (cpu_seconds(exporter.pid) - c0) / (time.monotonic() - t0)
            idle_threads = busiest(threads0, thread_cpu(exporter.pid), time.monotonic() - t0)

            latencies = []
            size = 0
            c0, t0 = cpu_seconds(exporter.pid), time.monotonic()
            u0, s0 = cpu_split(exporter.pid)
            for _ in range(args.scrapes):
                s = time.perf_counter()
                body = urllib.request.urlopen(url, timeout=10).read()
                latencies.append(time.perf_counter() - s)
                size = len(body)
            wall = time.monotonic() - t0
            cpu = cpu_seconds(exporter.pid) - c0
            u1, s1 = cpu_split(exporter.pid)
            per_scrape = (cpu - idle_cpu_per_s * wall) / args.scrapes
            now_rss, hwm = rss(exporter.pid)
            series = sum(1 for line in body.decode().splitlines()
                         if line and not line.startswith("#"))
        finally:
            exporter.send_signal(signal.SIGTERM)
            exporter.wait(timeout=10)
            for p in sleepers:
                p.kill()
            for p in sleepers:
                p.wait()
    latencies.sort()
    p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)]
    print(f"synthetic node: {args.containers} containers in "
          f"{(args.containers + 2) // 3} pods, {args.processes} processes, "
          f"sampler every {args.sampler_interval}; run {secrets.token_hex(2)}")
    print(f"/metrics body              {size / 1024:.0f} KiB, {series} series")
    print(f"CPU per scrape             {per_scrape * 1000:.1f} ms "
          f"(raw {cpu / args.scrapes * 1000:.1f} ms incl. sampler: user "
          f"{(u1 - u0) / args.scrapes * 1000:.1f} ms, kernel {(s1 - s0) / args.scrapes * 1000:.1f}"
          " ms)")
    print(f"latency p50 / p99          {statistics.median(latencies) * 1000:.1f} ms / "
          f"{p99 * 1000:.1f} ms over {args.scrapes} scrapes")
    print(f"exporter RSS / high water  {now_rss / 2**20:.1f} MiB / {hwm / 2**20:.1f} MiB")
    print(f"sampler idle CPU           {idle_cpu_per_s * 100:.2f}% of a core "
          f"({shares(idle_threads, exporter.pid)})")
    print(f"in all, scraped every {args.every:g} s  "
          f"{(idle_cpu_per_s + per_scrape / args.every) * 100:.2f}% of a core "
          "(idle CPU + CPU per scrape / interval)")
    durations = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1]) * 1000
        for line in body.decode().splitlines()
        if line.startswith("headroom_collector_duration_seconds{")
    }
    orphaned = sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
                   if line.startswith("headroom_tmpfs_orphaned_bytes{"))
    print(f"stale /dev/shm             {args.shm_pods} pods of {args.shm_pod_processes} "
          f"processes with a private /dev/shm, rescanned every {args.orphans_interval}: "
          f"{orphaned / 2**20:.0f} MiB orphaned")
    print("last scrape, wall ms       " + ", ".join(
        f"{k} {v:.1f}" for k, v in sorted(durations.items())))


def idle_report(pid: int, args: argparse.Namespace) -> None:
    time.sleep(SETTLE)  # let the first samples and any start-up work settle
    runs = []
    threads0, w0 = thread_cpu(pid), time.monotonic()
    for _ in range(args.repeat):
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(args.idle)
        runs.append((cpu_seconds(pid) - c0) / (time.monotonic() - t0))
    top = busiest(threads0, thread_cpu(pid), time.monotonic() - w0)
    print(f"synthetic node: {args.containers} containers in {(args.containers + 2) // 3} pods, "
          f"{args.processes} processes, sampler every {args.sampler_interval}")
    print("idle CPU per window        " + ", ".join(f"{r * 100:.2f}%" for r in runs))
    print(f"idle CPU median            {statistics.median(runs) * 100:.2f}% of a core "
          f"({args.repeat} x {args.idle:g} s, no scrapes)")
    print(f"idle CPU per thread        {shares(top, pid)}")


if __name__ == "__main__":
    main()
