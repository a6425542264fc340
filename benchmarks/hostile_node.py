"""A hostile node, all at once (a benchmark with pass/fail criteria, not a unit test).

    python benchmarks/hostile_node.py [--seconds 60] [--fd-limit 1024] [--json out.json]

Builds on this kernel (memory cgroups beneath this process's own, kubelet-shaped):

- pod ``names``: 15 processes whose argv[0] is 128 KB (``exec -a``; huge-process-names);
- pod ``many``: 1,100 processes against an exporter open-file limit of 1,024 (fd-exhaustion);
- pod ``zombie``: a container whose main thread exited, its leader a zombie (zombie-leader);
- pod ``blank``: a process whose argv[0] is a space (blank-argv0);
- pod ``healthy``: a named worker with a 32 MiB /dev/shm file: the series that must stay;
- 1,000 idle TCP connections to the exporter, re-opened as the exporter closes them
  (fd-exhaustion).

Each name in brackets is a threat of docs/threats.md.

The real exporter runs under ``prlimit --nofile=N:N``. Every second it is scraped
(/metrics and /healthz, 10 s client timeout); each scrape must answer, report every
collector successful, and carry the healthy pod's cgroup, process and tmpfs series.
Reported: /metrics and /healthz latency (p50, p99, max), exporter RSS (max, after),
open fds (max), log bytes, idle connections held. The exit status is 1 when a criterion
fails: any unanswered scrape, a missing healthy series, RSS at or above the chart's
memory limit (160 MiB). Needs root and a writable cgroup v1 memory controller.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from tests.helpers.kernel import KubeTree, kube_tree

CHART_MEMORY_LIMIT = 160 << 20
ZOMBIE_LEADER = """
import threading, time, ctypes
threading.Thread(target=lambda: time.sleep(3600)).start()
ctypes.CDLL(None).syscall(60, 0)
"""


def spawn(tree: KubeTree, rel: str, argv: list[str], executable: str | None = None
          ) -> subprocess.Popen[bytes]:
    procs = tree.hierarchy.dir(rel) / "cgroup.procs"
    return subprocess.Popen(argv, executable=executable,
                            preexec_fn=lambda: procs.write_text(str(os.getpid())),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def get(url: str, timeout: float = 10.0) -> tuple[int, float, bytes]:
    start = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read()
            return r.status, time.monotonic() - start, body
    except urllib.error.HTTPError as e:
        return e.code, time.monotonic() - start, b""
    except OSError:
        return 0, time.monotonic() - start, b""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class IdleFlood:
    """Keeps up to ``n`` idle connections open, re-opening those the exporter closes."""

    def __init__(self, port: int, n: int) -> None:
        self.port, self.n = port, n
        self.sel = selectors.DefaultSelector()
        self.socks: set[socket.socket] = set()
        self.opened = self.closed_by_server = 0

    def top_up(self) -> None:
        for _ in range(self.n - len(self.socks)):
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            except OSError:
                break
            s.setblocking(False)
            self.sel.register(s, selectors.EVENT_READ)
            self.socks.add(s)
            self.opened += 1

    def reap(self) -> None:
        for key, _ in self.sel.select(timeout=0):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                data = s.recv(1)
            except OSError:
                data = b""
            if not data:
                self.sel.unregister(s)
                s.close()
                self.socks.discard(s)
                self.closed_by_server += 1

    def close(self) -> None:
        for s in self.socks:
            s.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--fd-limit", type=int, default=1024)
    ap.add_argument("--many", type=int, default=1100)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    started: list[subprocess.Popen[bytes]] = []
    repo = Path(__file__).resolve().parent.parent
    with kube_tree() as tree:
        pods = {name: tree.pod() for name in ("names", "many", "zombie", "blank", "healthy")}
        cont = {name: tree.container(rel) for name, (_, rel) in pods.items()}
        for i in range(15):
            started.append(spawn(tree, cont["names"][1], [f"{i:02d}" + "n" * 131_000, "3600"],
                                 "/bin/sleep"))
        started.append(spawn(tree, cont["many"][1], [
            "bash", "-c", f"for i in $(seq {args.many}); do sleep 3600 & done; wait"]))
        started.append(spawn(tree, cont["zombie"][1], [sys.executable, "-c", ZOMBIE_LEADER]))
        started.append(spawn(tree, cont["blank"][1], [" ", "3600"], "/bin/sleep"))
        shm = Path(f"/dev/shm/headroom-hostile-{os.getpid()}")
        tree.shm_files.append(shm)
        started.append(spawn(tree, cont["healthy"][1], [
            sys.executable, "-c",
            f"import time; open({str(shm)!r}, 'wb').write(b'\\1' * (32 << 20)); "
            "time.sleep(3600)"]))
        time.sleep(3)  # the 1,100 sleeps and the shm file
        port = 20000 + os.getpid() % 20000
        log = Path(f"/tmp/headroom-hostile-{os.getpid()}.log")
        with log.open("wb") as out:
            exporter = subprocess.Popen(
                ["prlimit", f"--nofile={args.fd_limit}:{args.fd_limit}", sys.executable, "-m",
                 "exporter.cli", "serve", f"--web.listen-address=127.0.0.1:{port}",
                 f"--cgroup.kubepods-path={tree.kubepods}", "--no-collector.kubernetes",
                 "--cgroup.host-vllm=false",  # nothing from the host's /proc
                 "--no-collector.nvml", "--no-collector.vllm", "--path.kmsg=",
                 "--flight-recorder.window=2m"],
                cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
                stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while get(url + "/healthz", 1)[0] != 200:
            assert time.monotonic() < deadline and exporter.poll() is None, "no exporter"
            time.sleep(0.1)
        flood = IdleFlood(port, args.idle)
        flooding = threading.Event()

        def keep_flooding() -> None:  # its own thread: scrapes stay once a second
            while not flooding.is_set():
                flood.top_up()
                flood.reap()
                time.sleep(0.05)

        flooder = threading.Thread(target=keep_flooding, daemon=True)
        flooder.start()
        healthy_uid = pods["healthy"][0]
        # The healthy pod's series, one per collector: cgroup, procfs, tmpfs.
        need = {"headroom_memory_usage_bytes{": "", "headroom_process_memory_bytes{": "process=",
                "headroom_tmpfs_used_bytes{": 'mount="/dev/shm"'}
        lat_m: list[float] = []
        lat_h: list[float] = []
        failures: list[str] = []
        rss_max = fd_max = 0
        sizes: list[int] = []
        held: list[int] = []
        end = time.monotonic() + args.seconds
        scrapes = 0
        while time.monotonic() < end:
            held.append(len(flood.socks))
            status, took, body = get(url + "/metrics")
            scrapes += 1
            lat_m.append(took)
            text = body.decode(errors="replace")
            if status != 200:
                failures.append(f"scrape {scrapes}: /metrics status {status} after {took:.1f}s")
            else:
                sizes.append(len(body))
                for c in ("discovery", "cgroup", "procfs", "tmpfs"):
                    if f'headroom_collector_success{{collector="{c}"}} 1' not in text:
                        failures.append(f"scrape {scrapes}: collector {c} not successful")
                mine = [line for line in text.splitlines() if f'pod="{healthy_uid}"' in line]
                for name, part in need.items():
                    if not any(line.startswith(name) and part in line for line in mine):
                        failures.append(f"scrape {scrapes}: healthy series missing: {name}")
            hs, ht, _ = get(url + "/healthz")
            lat_h.append(ht)
            if hs != 200:
                failures.append(f"scrape {scrapes}: /healthz status {hs}")
            rss_max = max(rss_max, status_kib(exporter.pid, "VmRSS"))
            fd_max = max(fd_max, fds(exporter.pid))
            time.sleep(max(0.0, 1.0 - took))
        rss_after = status_kib(exporter.pid, "VmRSS")
        hwm = status_kib(exporter.pid, "VmHWM")
        fds_after = fds(exporter.pid)
        flooding.set()
        flooder.join(timeout=30)
        flood.close()
        exporter.send_signal(signal.SIGTERM)
        exit_code = exporter.wait(timeout=30)
        for p in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
    result = {
        "seconds": args.seconds, "fd_limit": args.fd_limit, "scrapes": scrapes,
        "failures": len(failures), "first_failures": failures[:10],
        "metrics_latency_s": {"p50": round(pct(lat_m, 0.5), 4), "p99": round(pct(lat_m, 0.99), 4),
                              "max": round(max(lat_m), 4)},
        "healthz_latency_s": {"p50": round(pct(lat_h, 0.5), 4), "p99": round(pct(lat_h, 0.99), 4),
                              "max": round(max(lat_h), 4)},
        "rss_mib": {"max_sampled": round(rss_max / 1024, 1), "after": round(rss_after / 1024, 1),
                    "high_water": round(hwm / 1024, 1),
                    "chart_limit": CHART_MEMORY_LIMIT >> 20},
        "fds": {"max": fd_max, "after": fds_after},
        "metrics_bytes": {"median": int(statistics.median(sizes)) if sizes else 0,
                          "max": max(sizes, default=0)},
        "idle_connections_held": {"median": int(statistics.median(held)) if held else 0,
                                  "opened": flood.opened,
                                  "closed_by_exporter": flood.closed_by_server},
        "log_bytes": log.stat().st_size,
        "exporter_exit": exit_code,
    }
    log.unlink()
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    ok = not failures and hwm << 10 < CHART_MEMORY_LIMIT and exit_code == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
