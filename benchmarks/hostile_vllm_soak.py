"""Hostile-pod soak of the vLLM path: the known attackers (docs/threats.md, the vLLM path)
together against a real ``headroom serve`` while a scrape loop checks that a healthy pod's
series are present on every scrape and /healthz answers within a second.

    sudo python3 benchmarks/hostile_vllm_soak.py [--seconds 600] [--json OUT]

Runs itself in a sandbox: new PID and network namespaces (``unshare --pid --net --fork
--mount-proc``), loopback only, so nothing of the host enters and nothing leaves. Each pod
is a memory cgroup beneath this process's own (``--cgroup.track``); the exporter runs in
one more with the chart's limit (160 MiB). Pods (benchmarks/hostile_vllm_pod.py):
good (a vLLM 0.32 body), kv-groups (20,000 KV cache groups per batch, 5 batches a
second), kv-bomb (400 x 512 KiB frames in one message, a 64 MiB frame), silent (4 ports
that accept and never answer: silent-ports), big (six API servers with 8 MiB bodies:
big-bodies), netns (an API server in a network namespace it made, with 10.99.0.1 added
there; the same address in the exporter's namespace records every connection:
own-network-namespace).

Prints a JSON report; exit 1 when a check failed (a scrape without the good pod's
series, a /healthz over 1 s, the exporter killed, a connection to 10.99.0.1).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
POD = REPO / "benchmarks" / "hostile_vllm_pod.py"
LIMIT = 160 << 20  # the chart's memory limit
DECOY = "10.99.0.1"  # netns: the address a pod adds in a namespace of its own


@dataclass
class Report:
    seconds: float = 0.0
    scrapes: int = 0
    scrapes_with_good_pod: int = 0
    scrape_max_s: float = 0.0
    healthz: int = 0
    healthz_late_or_failed: int = 0
    healthz_max_s: float = 0.0
    exporter_alive: bool = True
    exporter_oom_kills: int = 0
    exporter_peak_bytes: int = 0  # the cgroup's high-water mark (v1 max_usage, v2 peak)
    decoy_connections: int = 0
    kv_lost: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.scrapes > 0 and self.scrapes_with_good_pod == self.scrapes
                and self.healthz_late_or_failed == 0 and self.exporter_alive
                and self.exporter_oom_kills == 0 and self.exporter_peak_bytes < LIMIT
                and self.decoy_connections == 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sh(cmd: str) -> None:
    subprocess.run(["sh", "-c", cmd], check=True)


class Cgroups:
    """Memory cgroups beneath this process's own (v1 or v2)."""

    def __init__(self) -> None:
        sys.path.insert(0, str(REPO))
        from exporter.host.paths import HostPaths, self_memory_cgroup

        self.h = HostPaths().detect_memory_hierarchy()
        self.base = f"{self_memory_cgroup(Path('/proc')).strip('/')}/hr-soak-{secrets.token_hex(3)}"
        self.made: list[Path] = []
        self.mkdir("")

    def mkdir(self, name: str) -> str:
        rel = f"{self.base}/{name}".rstrip("/")
        d = self.h.dir(rel)
        d.mkdir()
        self.made.append(d)
        if self.h.version == 2 and not name:
            (d / "cgroup.subtree_control").write_text("+memory")
        return rel

    def limit(self, rel: str, limit: int) -> None:
        name = "memory.max" if self.h.version == 2 else "memory.limit_in_bytes"
        (self.h.dir(rel) / name).write_text(str(limit))

    def read(self, rel: str, name: str) -> str:
        try:
            return (self.h.dir(rel) / name).read_text()
        except OSError:
            return ""

    def cleanup(self) -> None:
        for d in reversed(self.made):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def start_in(cg: Cgroups, rel: str, argv: list[str], prefix: str = "") -> subprocess.Popen[bytes]:
    """A process that joins cgroup ``rel`` before it execs (its children follow it)."""
    procs = cg.h.dir(rel) / "cgroup.procs"
    cmd = f"echo $$ > {procs} && {prefix} exec " + " ".join(f"'{a}'" for a in argv)
    return subprocess.Popen(["sh", "-c", cmd], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def decoy(port: int, report: Report) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((DECOY, port))
    s.listen(64)

    def loop() -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            report.decoy_connections += 1
            conn.close()

    threading.Thread(target=loop, daemon=True).start()
    return s


def get(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def healthz_loop(url: str, report: Report, stop: threading.Event, limit: float) -> None:
    while not stop.is_set():
        start = time.monotonic()
        try:
            get(url + "/healthz", limit)
            failed = False
        except OSError:
            failed = True
        took = time.monotonic() - start
        report.healthz += 1
        report.healthz_max_s = max(report.healthz_max_s, took)
        report.healthz_late_or_failed += failed or took > limit
        stop.wait(0.25)


def check_scrape(text: str, good: str, report: Report) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    up = False
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "headroom_vllm_up" and good in s.labels.get("pod", "") and s.value == 1:
                up = True
            if s.name == "headroom_vllm_kv_events_lost_total":
                key = f"{s.labels.get('pod', '')[-14:]}:{s.labels.get('reason')}"
                report.kv_lost[key] = s.value
    report.scrapes_with_good_pod += up


ATTACKERS = ("kvgroups", "kvbomb", "silent", "big", "netns")


def run(seconds: float, attackers: tuple[str, ...] = ATTACKERS, healthz_limit: float = 1.0
        ) -> Report:
    report = Report()
    sh(f"ip link set lo up && ip addr add {DECOY}/32 dev lo")
    cg = Cgroups()
    procs: list[subprocess.Popen[bytes]] = []
    tmp = tempfile.mkdtemp(prefix="hr-soak-")
    try:
        pods: dict[str, str] = {}
        for name in ("good", "kvgroups", "kvbomb", "silent", "big", "netns", "exporter"):
            pods[name] = cg.mkdir(name)
        py = sys.executable
        procs.append(start_in(cg, pods["good"], [py, str(POD), "good", str(free_port())]))
        port = free_port()
        decoy_sock = decoy(port, report)
        for mode, name in (("kv-groups", "kvgroups"), ("kv-bomb", "kvbomb")):
            if name not in attackers:
                continue
            ports = sorted(free_port() for _ in range(3))
            procs.append(start_in(cg, pods[name], [py, str(POD), mode, *map(str, ports)]))
        if "silent" in attackers:
            procs.append(start_in(cg, pods["silent"], [
                py, str(POD), "silent", *(str(free_port()) for _ in range(4))]))
        for _ in range(6 * ("big" in attackers)):
            procs.append(start_in(cg, pods["big"], [py, str(POD), "big", str(free_port())]))
        if "netns" in attackers:
            # netns: the pod's sandbox process first, then an API server in a namespace
            # it makes itself
            procs.append(start_in(cg, pods["netns"], ["sleep", "1000000"]))
            time.sleep(0.2)
            procs.append(start_in(cg, pods["netns"], [
                "unshare", "-n", "sh", "-c", f"ip link set lo up && ip addr add {DECOY}/32 "
                f"dev lo && exec {py} {POD} good {port}"]))
        cg.limit(pods["exporter"], LIMIT)
        listen = free_port()
        url = f"http://127.0.0.1:{listen}"
        tracks = [a for n, p in pods.items() if n != "exporter"
                  for a in ("--cgroup.track", p)]
        env_prefix = f"PYTHONPATH={REPO}"
        exporter = start_in(cg, pods["exporter"], [
            py, "-m", "exporter.cli", "serve", "--web.listen-address", f"127.0.0.1:{listen}",
            "--no-collector.nvml", "--no-collector.kubernetes", "--path.kmsg=",
            "--flight-recorder.dir", f"{tmp}/oom", *tracks], prefix=env_prefix)
        procs.append(exporter)
        end = time.monotonic() + 60
        while True:
            try:
                get(url + "/healthz", 2)
                break
            except OSError:
                if time.monotonic() > end or exporter.poll() is not None:
                    report.problems.append("the exporter did not come up")
                    report.exporter_alive = False
                    return report
                time.sleep(0.3)
        get(url + "/metrics", 30)  # the first scrape finds the pods
        stop = threading.Event()
        pinger = threading.Thread(target=healthz_loop, args=(url, report, stop, healthz_limit),
                                  daemon=True)
        pinger.start()
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            t0 = time.monotonic()
            try:
                text = get(url + "/metrics", 30).decode()
                report.scrapes += 1
                check_scrape(text, "good", report)
            except OSError as exc:
                report.scrapes += 1
                report.problems.append(f"scrape failed: {exc}"[:200])
            report.scrape_max_s = max(report.scrape_max_s, time.monotonic() - t0)
            if exporter.poll() is not None:
                report.exporter_alive = False
                break
            time.sleep(max(0.0, 2.0 - (time.monotonic() - t0)))
        stop.set()
        pinger.join(5)
        report.seconds = round(time.monotonic() - start, 1)
        decoy_sock.close()
    finally:
        stats = cg.read(pods.get("exporter", ""), "memory.max_usage_in_bytes") or cg.read(
            pods.get("exporter", ""), "memory.peak")
        report.exporter_peak_bytes = int(stats.strip() or 0)
        events = cg.read(pods.get("exporter", ""), "memory.oom_control") or cg.read(
            pods.get("exporter", ""), "memory.events")
        for line in events.splitlines():
            if line.startswith("oom_kill "):
                report.exporter_oom_kills = int(line.split()[1])
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(10)
        cg.cleanup()
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--healthz-limit", type=float, default=1.0,
                    help="seconds /healthz may take (default 1)")
    ap.add_argument("--attackers", default=",".join(ATTACKERS),
                    help=f"comma-separated, of {','.join(ATTACKERS)} (empty: the healthy "
                    "pod alone, the baseline to compare with)")
    args = ap.parse_args()
    if os.environ.get("HEADROOM_SOAK_SANDBOX") != "1":
        os.execvp("unshare", ["unshare", "--pid", "--net", "--fork", "--mount-proc",
                              "env", "HEADROOM_SOAK_SANDBOX=1", sys.executable, __file__,
                              *sys.argv[1:]])
    report = run(args.seconds, tuple(a for a in args.attackers.split(",") if a),
                 args.healthz_limit)
    out = json.dumps({**asdict(report), "ok": report.ok}, indent=2)
    print(out)
    if args.json:
        args.json.write_text(out)
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
