"""Cost of the shipped rules in a real Prometheus (a benchmark, not a test).

    python3 -m benchmarks.rule_cost [--containers 1000 10000] [--wait 420]

For each size: a synthetic exporter (one HTTP server holding a node-shaped exposition:
N containers, each with its pod-level cgroup, 3 processes, memory kinds, /dev/shm and
vLLM series) is scraped every 15 s by a real Prometheus (the Debian package) evaluating
the shipped rules (`alerts/headroom.rules.yaml`) at the default 1 m evaluation interval.
The history the rules read is backfilled first with `promtool tsdb create-blocks-from
openmetrics`: the recorded figures of the 1-minute group that are read over windows (35 minutes,
unreclaimable memory 65),
and the hourly minima and maxima of the lasting group (every 5 min) for the two days
plus an hour it reads. No raw series is backfilled: no rule reads more than 15 minutes
of raw samples (the fast group holds the last sample for 10 minutes; rates over 15).

Then it waits until every group has evaluated (the lasting group once, the others at
least three times) and prints, per group,
`prometheus_rule_group_last_duration_seconds` (the wall time of its last round), the
samples it wrote in that round, and the number of series the rules record.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from alerts.generate import rules_yaml
from exporter import catalog as c
from exporter import promql as q
from tests.helpers.net import free_port, stop_all

GiB = 1024**3
MiB = 1024**2
PROCESSES = ("APIServer", "EngineCore", "Worker_TP0")
FAST_HISTORY_S = 65 * 60
LASTING_HISTORY_S = 49 * 3600


@dataclass(frozen=True)
class Cgroup:
    pod: str
    container: str  # "" = the pod-level cgroup
    limit: float
    level: float  # unreclaimable, bytes

    @property
    def labels(self) -> str:
        return f'namespace="llm",pod="{self.pod}",container="{self.container}"'


def node(containers: int, seed: int = 1) -> list[Cgroup]:
    rng = random.Random(seed)
    out = []
    for i in range(containers):
        limit = rng.choice((16, 24, 32, 48)) * GiB
        level = rng.uniform(0.3, 0.8) * limit
        out.append(Cgroup(f"vllm-{i}", "vllm", limit, level))
        out.append(Cgroup(f"vllm-{i}", "", limit, level + 16 * MiB))
    return out


def exposition(cgroups: list[Cgroup]) -> bytes:
    lines: list[str] = []

    def put(name: str, labels: str, value: float) -> None:
        lines.append(f"{name}{{{labels}}} {value:.0f}")

    for cg in cgroups:
        lb = cg.labels
        put(c.MEMORY_LIMIT_BYTES.name, lb, cg.limit)
        put(c.MEMORY_UNRECLAIMABLE_BYTES.name, lb, cg.level)
        put(c.MEMORY_USAGE_BYTES.name, lb, cg.level + 2 * GiB)
        put(c.MEMORY_WORKING_SET_BYTES.name, lb, cg.level + GiB)
        for event in ("max", "oom_kill"):
            put(c.MEMORY_EVENTS_TOTAL.name, f'{lb},event="{event}"', 0)
        for kind, share in (("anon", 0.6), ("shmem", 0.3), ("kernel", 0.05), ("sock", 0.01),
                            ("file_active", 0.1), ("file_inactive", 0.1)):
            put(c.MEMORY_BYTES.name, f'{lb},kind="{kind}"', share * cg.level)
        if cg.container:
            for p in PROCESSES:
                put(c.PROCESS_MEMORY_BYTES.name, f'{lb},process="{p}",kind="rss_anon"',
                    0.2 * cg.level)
                put(c.PROCESS_MEMORY_BYTES.name, f'{lb},process="{p}",kind="rss_shmem"',
                    0.05 * cg.level)
            put(c.VLLM_UP.name, lb, 1)
        else:
            for name, v in ((c.TMPFS_USED_BYTES.name, GiB), (c.TMPFS_SIZE_BYTES.name, 8 * GiB)):
                put(name, f'{lb},mount="/dev/shm"', v)
    return ("\n".join(lines) + "\n").encode()


def _series_history(cgroups: list[Cgroup], now: float, lo: int, hi: int) -> Iterator[str]:
    """OpenMetrics text of the recorded series the rules read over windows, for the
    samples in [lo, hi)."""
    def within(r: range) -> list[int]:
        return [t for t in r if lo <= t < hi]

    fast_u = within(range(int(now - FAST_HISTORY_S), int(now) - 120, 60))
    fast = within(range(int(now - 35 * 60), int(now) - 120, 60))  # the longest: 30m
    lasting = within(range(int(now - LASTING_HISTORY_S), int(now) - 600, 300))

    def family(name: str, rows: Iterator[tuple[str, float]], times: list[int]
               ) -> Iterator[str]:
        if not times:
            return
        yield f"# TYPE {name} gauge\n"
        for labels, value in rows:
            for t in times:
                yield f"{name}{{{labels}}} {value:.0f} {t}\n"

    def per_cgroup(f: float = 1.0) -> Iterator[tuple[str, float]]:
        return ((cg.labels, cg.level * f) for cg in cgroups)

    yield from family(q.UNRECLAIMABLE, per_cgroup(), fast_u)  # spans: an hour ago
    for name in (q.WORKING_SET, q.HIDDEN):  # read by the hourly minima
        yield from family(name, per_cgroup(), fast)
    for name in (q.SLOPE_SHORT, q.SLOPE_MEDIUM):
        yield from family(name, per_cgroup(0), fast)
    yield from family(q.PROCESS_MEMORY, ((f'{cg.labels},process="{p}"', 0.25 * cg.level)
                                         for cg in cgroups if cg.container
                                         for p in PROCESSES), fast)
    yield from family(q.MEMORY_KIND, ((f'{cg.labels},kind="{k}"', 0.2 * cg.level)
                                      for cg in cgroups
                                      for k in ("anon", "shmem", "kernel", "sock")), fast)
    yield from family(q.TMPFS_USED, ((f'{cg.labels},mount="/dev/shm"', GiB)
                                     for cg in cgroups if not cg.container), fast)
    yield from family(q.VLLM_UP, ((cg.labels, 1.0) for cg in cgroups if cg.container), fast)
    for name in (q.HOURLY_MAX, q.HOURLY_MIN, q.WORKING_SET_HOURLY_MIN, q.HIDDEN_HOURLY_MIN):
        yield from family(name, per_cgroup(), lasting)
    yield from family(q.VLLM_ANSWERED, ((cg.labels, 1.0) for cg in cgroups if cg.container),
                      lasting)
    yield "# EOF\n"


def backfill(cgroups: list[Cgroup], data: Path, work: Path, promtool: str) -> int:
    """One OpenMetrics file per 2-hour block: promtool reads its whole input once per
    block it writes, so one file for two days would be read 25 times."""
    now = time.time()
    block = 2 * 3600
    lines = 0
    first = int(now - LASTING_HISTORY_S) // block * block
    for lo in range(first, int(now), block):
        text = work / f"history-{lo}.om"
        with text.open("w") as f:
            for line in _series_history(cgroups, now, lo, lo + block):
                f.write(line)
                lines += 1
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(text),
                        str(data)], check=True, capture_output=True, timeout=3600)
        text.unlink()
    return lines


class Exporter:
    def __init__(self, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def _self_metric(prom: str, name: str) -> dict[str, float]:
    """Rule group -> value of one of Prometheus' own metrics, from its /metrics (a
    Prometheus without a self-scrape job has none of them in its TSDB)."""
    with urllib.request.urlopen(f"{prom}/metrics", timeout=60) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            group = labels.split('rule_group="', 1)[1].split('"', 1)[0].split(";")[-1]
            out[group] = float(value)
    return out


def _query(prom: str, expr: str) -> list[dict[str, object]]:
    url = f"{prom}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=60) as r:
        result: list[dict[str, object]] = json.load(r)["data"]["result"]
    return result


def measure(containers: int, wait_s: int) -> dict[str, object]:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert prometheus and promtool, "needs the prometheus package"
    cgroups = node(containers)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        started = time.monotonic()
        samples = backfill(cgroups, data, work, promtool)
        backfill_s = time.monotonic() - started
        exporter = Exporter(exposition(cgroups))
        (work / "headroom.rules.yaml").write_text(rules_yaml())
        port = free_port()
        (work / "prometheus.yml").write_text(
            "global: {scrape_interval: 15s, evaluation_interval: 1m}\n"
            "rule_files: [headroom.rules.yaml]\n"
            "scrape_configs:\n- job_name: headroom\n"
            f"  static_configs: [{{targets: ['127.0.0.1:{exporter.port}']}}]\n")
        proc = subprocess.Popen(
            [prometheus, f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=30d"],
            stdout=subprocess.DEVNULL, stderr=(work / "prom.log").open("w"))
        prom = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + wait_s
            rounds: dict[str, float] = {}
            while time.monotonic() < deadline:
                time.sleep(15)
                try:
                    rounds = _self_metric(prom, "prometheus_rule_group_iterations_total")
                except OSError:
                    continue
                if len(rounds) >= 4 and min(rounds.values()) >= 1 and sorted(
                        rounds.values())[1] >= 3:
                    break
            groups = _self_metric(prom, "prometheus_rule_group_last_duration_seconds")
            written = _self_metric(prom, "prometheus_rule_group_last_evaluation_samples")
            recorded = _query(prom, 'count({__name__=~"headroom:.+"})')
            head = _query(prom, 'count({__name__=~".+"})')
        finally:
            stop_all([proc])
            exporter.close()
    return {
        "containers": containers, "cgroups": len(cgroups),
        "backfilled_samples": samples, "backfill_s": round(backfill_s),
        "rounds": rounds, "group_last_duration_s": groups,
        "load_average_1m": round(os.getloadavg()[0], 1),
        "group_last_samples": written,
        "rule_set_duration_s": round(sum(groups.values()), 3),
        "recorded_series": int(float(recorded[0]["value"][1])) if recorded else 0,  # type: ignore[index]
        "series": int(float(head[0]["value"][1])) if head else 0,  # type: ignore[index]
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--wait", type=int, default=720,
                    help="longest wait for every group's second round (s)")
    args = ap.parse_args()
    for n in args.containers:
        print(json.dumps(measure(n, args.wait)), flush=True)


if __name__ == "__main__":
    main()
