"""Cost of the shipped rules in a real Prometheus (a benchmark, not a test).

    python3 -m benchmarks.rule_cost [--containers 1000 10000] [--lasting-rounds 2]

For each size: a synthetic exporter (one HTTP server holding a node-shaped exposition:
N containers, each with its pod-level cgroup, 3 processes, memory kinds, /dev/shm and
vLLM series; one container in ten leaks 3 % of its limit a day) is scraped every 15 s
by a real Prometheus (the Debian package) evaluating the shipped rules
(`alerts/headroom.rules.yaml`) at the default 1 m evaluation interval.

The history each rule reads is backfilled first with `promtool tsdb
create-blocks-from openmetrics`, and only that (`HISTORY`): the 1-minute recorded
figures over the windows read (the last hour, the same hour a day ago for the
day-over-day rises, 6 h of /dev/shm for its forecast, a day of the growth a leak
records), the lasting group's 5-minute figures over the two days and an hour its
rises read, and the raw `memory.events` counters over the hour and ten minutes the
OOM alert reads. The other raw series are read over at most 15 minutes: the scrapes
fill those windows before the lasting group's second round is measured. The
backfill is one OpenMetrics file per 6-hour block (promtool reads its whole input
once per block it writes), converted two at a time; Prometheus runs with 6-hour
blocks at most, so no compaction runs while the rules are measured.

Then it waits until the lasting group has evaluated ``--lasting-rounds`` times and
the others at least three times and prints, per group,
`prometheus_rule_group_last_duration_seconds` (the wall time of its last round, and
of every round seen), the samples it wrote in that round, the number of series the
rules record, the costliest rules (`evaluationTime` of /api/v1/rules), the load
average while it measured, and the time each phase took.
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

from alerts.generate import rules_yaml
from exporter import catalog as c
from exporter import promql as q
from tests.helpers.net import free_port, stop_all

GiB = 1024**3
MiB = 1024**2
MINUTE, HOUR, DAY = 60, 3600, 86400
PROCESSES = ("APIServer", "EngineCore", "Worker_TP0")
# The share of unreclaimable memory per kind and per process (anon, shmem).
KINDS = (("anon", 0.6), ("shmem", 0.3), ("kernel", 0.05), ("sock", 0.01))
PROCESS_SHARE = (0.2, 0.05)
LEAKING_EVERY = 10  # one container in ten leaks
LEAK_PER_DAY = 0.03  # of its limit
BLOCK_S = 6 * HOUR  # promtool's and Prometheus' block length
JITTER_DIGITS = 6  # figures in bytes get up to 1 MB of noise: chunks that compress as real ones


@dataclass(frozen=True)
class Cgroup:
    pod: str
    container: str  # "" = the pod-level cgroup
    limit: float
    level: float  # unreclaimable, bytes, now
    leak: float  # B/s

    @property
    def labels(self) -> str:
        return f'namespace="llm",pod="{self.pod}",container="{self.container}"'


def node(containers: int, seed: int = 1) -> list[Cgroup]:
    rng = random.Random(seed)
    out = []
    for i in range(containers):
        limit = rng.choice((16, 24, 32, 48)) * GiB
        level = rng.uniform(0.3, 0.8) * limit
        leak = LEAK_PER_DAY * limit / DAY if i % LEAKING_EVERY == 0 else 0.0
        out.append(Cgroup(f"vllm-{i}", "vllm", limit, level, leak))
        out.append(Cgroup(f"vllm-{i}", "", limit, level + 16 * MiB, leak))
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
        for kind, share in (*KINDS, ("file_active", 0.1), ("file_inactive", 0.1)):
            put(c.MEMORY_BYTES.name, f'{lb},kind="{kind}"', share * cg.level)
        if cg.container:
            for p in PROCESSES:
                for kind, share in zip(("rss_anon", "rss_shmem"), PROCESS_SHARE, strict=True):
                    put(c.PROCESS_MEMORY_BYTES.name, f'{lb},process="{p}",kind="{kind}"',
                        share * cg.level)
            put(c.VLLM_UP.name, lb, 1)
        else:
            for name, v in ((c.TMPFS_USED_BYTES.name, GiB), (c.TMPFS_SIZE_BYTES.name, 8 * GiB)):
                put(name, f'{lb},mount="/dev/shm"', v)
    return ("\n".join(lines) + "\n").encode()


# A series of the history: labels, its value now, its slope (B/s; the value at t is
# value - slope * (now - t)).
Row = tuple[str, float, float]
# Samples every `step` seconds from `back` to `until` seconds before now.
Span = tuple[int, int, int]


def _rows(cgroups: list[Cgroup], instance: str) -> dict[str, Callable[[], Iterator[Row]]]:
    """What each backfilled family holds, per cgroup (the leak grows unreclaimable
    memory, its anon kind and EngineCore)."""
    ctr = [cg for cg in cgroups if cg.container]
    pods = [cg for cg in cgroups if not cg.container]
    attributed = sum(PROCESS_SHARE) * len(PROCESSES)
    return {
        "events": lambda: ((f'{cg.labels},event="{e}",instance="{instance}",job="headroom"',
                            0.0, 0.0) for cg in cgroups for e in ("max", "oom_kill")),
        "level": lambda: ((cg.labels, cg.level, cg.leak) for cg in cgroups),
        "working_set": lambda: ((cg.labels, cg.level + GiB, cg.leak) for cg in cgroups),
        "hidden": lambda: ((cg.labels, (1 - attributed) * cg.level, 0.0) for cg in cgroups),
        "slope": lambda: ((cg.labels, cg.leak, 0.0) for cg in cgroups),
        "leak": lambda: ((cg.labels, cg.leak, 0.0) for cg in cgroups if cg.leak),
        "kind": lambda: ((f'{cg.labels},kind="{k}"', share * cg.level,
                          cg.leak if k == "anon" else 0.0)
                         for cg in cgroups for k, share in KINDS),
        "process": lambda: ((f'{cg.labels},process="{p}"', sum(PROCESS_SHARE) * cg.level,
                             cg.leak if p == "EngineCore" else 0.0)
                            for cg in ctr for p in PROCESSES),
        "tmpfs": lambda: ((f'{cg.labels},mount="/dev/shm"', float(GiB), 0.0) for cg in pods),
        "one": lambda: ((cg.labels, 1.0, 0.0) for cg in ctr),
        "range": lambda: ((cg.labels, 10**JITTER_DIGITS, 0.0) for cg in cgroups),
    }


def _day_ago(hours: float = 1) -> Span:
    return DAY + int(hours * HOUR) + 2 * MINUTE, DAY - MINUTE, MINUTE


RECENT_HOUR: Span = (HOUR + MINUTE, 0, MINUTE)
# Family -> its rows and the spans the rules read (windows plus offsets, rounded up to
# a step), from alerts/headroom.rules.yaml.
HISTORY: tuple[tuple[str, str, tuple[Span, ...]], ...] = (
    # max_over_time(oom_kill[1h] offset 10m), rate(max[15m])
    (c.MEMORY_EVENTS_TOTAL.name, "events", ((HOUR + 12 * MINUTE, 0, 15),)),
    # deriv[30m], max_over_time[5m] offset 1h, max_over_time[1h] (hourly maxima)
    (q.UNRECLAIMABLE, "level", ((HOUR + 7 * MINUTE, 0, MINUTE),)),
    (q.WORKING_SET, "working_set", (RECENT_HOUR,)),  # min_over_time[1h]
    (q.HIDDEN, "hidden", (RECENT_HOUR, _day_ago())),  # deriv[1h], [1h] offset 1d
    (q.SLOPE_SHORT, "slope", ((7 * MINUTE, 0, MINUTE),)),  # min_over_time[6m]
    (q.SLOPE_MEDIUM, "slope", ((31 * MINUTE, 0, MINUTE),)),  # min_over_time[30m]
    (q.GROWTH + "\thorizon=medium", "leak", ((DAY, 0, MINUTE),)),  # max_over_time[1d]
    (q.MEMORY_KIND, "kind", (RECENT_HOUR, _day_ago())),
    (q.PROCESS_MEMORY, "process", (RECENT_HOUR, _day_ago())),
    # predict_linear[6h], deriv[1h], avg_over_time[1h] offset 1d
    (q.TMPFS_USED, "tmpfs", ((6 * HOUR + MINUTE, 0, MINUTE), _day_ago())),
    (q.VLLM_UP, "one", (RECENT_HOUR,)),  # max_over_time[1h]
    # The lasting group, every 5 min: rises over [1d] offset 1d (the maxima an hour
    # later), present_over_time[1h] offset 1d23h.
    (q.HOURLY_MAX, "level", ((2 * DAY + 2 * HOUR, 0, 300),)),
    (q.HOURLY_MIN, "level", ((2 * DAY + 5 * MINUTE, 0, 300),)),
    (q.HIDDEN_HOURLY_MIN, "hidden", ((2 * DAY + 5 * MINUTE, 0, 300),)),
    (q.WORKING_SET_HOURLY_MIN, "working_set", ((DAY + 5 * MINUTE, 0, 300),)),
    (q.GROWTH + "\thorizon=lasting", "leak", ((DAY + 5 * MINUTE, 0, 300),)),
    (q.VLLM_ANSWERED, "one", ((DAY + 5 * MINUTE, 0, 300),)),  # max_over_time[1d]
    (q.PEAK_ENVELOPE, "level", ((15 * MINUTE, 0, 300),)),  # last_over_time[15m]
    (q.HOURLY_RANGE, "range", ((15 * MINUTE, 0, 300),)),
)


def _label(extra: str) -> str:
    """`horizon=lasting` -> `,horizon="lasting"`."""
    if not extra:
        return ""
    key, value = extra.split("=")
    return f',{key}="{value}"'


def _times(now: int, spans: tuple[Span, ...]) -> list[int]:
    out: set[int] = set()
    for back, until, step in spans:
        out.update(range(-(-(now - back) // step) * step, now - until, step))
    return sorted(out)


def _series(head: str, value: float, slope: float, now: int, times: list[int],
            noisy: list[str], plain: list[str]) -> str:
    """One series' lines: constant figures in bytes carry a shared noise in their last
    digits (`noisy`: those digits and the timestamps; `plain`: the timestamps); a
    leak's are computed per sample."""
    if slope and value >= 10**JITTER_DIGITS:
        return "".join(f"{head} {value - slope * (now - t):.0f} {t}\n" for t in times)
    if value >= 10**JITTER_DIGITS:
        lead = f"{head} {int(value) // 10**JITTER_DIGITS}"
        return lead + lead.join(noisy)
    lead = f"{head} {value:.6g}"
    return lead + lead.join(plain)


def write_history(cgroups: list[Cgroup], instance: str, now: int,
                  block: Callable[[int], IO[str]]) -> int:
    """Writes the history into one OpenMetrics text per block (`block(start)`) and
    returns the number of samples."""
    rng = random.Random(7)
    jitter = [f"{rng.randrange(10**JITTER_DIGITS):0{JITTER_DIGITS}d}"
              for _ in range(4 * DAY // MINUTE)]
    rows = _rows(cgroups, instance)
    samples = 0
    for family, source, spans in HISTORY:
        name, _, extra = family.partition("\t")
        times = _times(now, spans)
        chunks: dict[int, list[int]] = {}
        for t in times:
            chunks.setdefault(t // BLOCK_S * BLOCK_S, []).append(t)
        for start, ts in chunks.items():
            noisy = [f"{j} {t}\n" for j, t in zip(jitter, ts, strict=False)]
            plain = [f" {t}\n" for t in ts]
            f = block(start)
            f.write(f"# TYPE {name} gauge\n")
            for labels, value, slope in rows[source]():
                lb = labels + _label(extra)
                f.write(_series(f"{name}{{{lb}}}", value, slope, now, ts, noisy, plain))
                samples += len(ts)
    return samples


def backfill(cgroups: list[Cgroup], instance: str, data: Path, work: Path,
             promtool: str) -> tuple[int, float, float]:
    """Returns the samples written, the seconds spent writing the text and converting it."""
    now = int(time.time())
    files: dict[int, IO[str]] = {}

    def block(start: int) -> IO[str]:
        if start not in files:
            files[start] = (work / f"history-{start}.om").open("w")
        return files[start]

    started = time.monotonic()
    samples = write_history(cgroups, instance, now, block)
    for f in files.values():
        f.write("# EOF\n")
        f.close()
    written = time.monotonic()

    def convert(f: IO[str]) -> None:
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                        f"--max-block-duration={BLOCK_S}s", f.name, str(data)],
                       check=True, capture_output=True, timeout=3600)
        Path(f.name).unlink()

    # The newest blocks hold most samples: start them first.
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(convert, sorted(files.values(), key=lambda f: f.name, reverse=True)))
    return samples, written - started, time.monotonic() - written


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


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as r:
        body: bytes = r.read()
    return body


def _self_metric(prom: str, name: str) -> dict[str, float]:
    """Rule group -> value of one of Prometheus' own metrics, from its /metrics (a
    Prometheus without a self-scrape job has none of them in its TSDB)."""
    out = {}
    for line in _get(f"{prom}/metrics").decode().splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            group = labels.split('rule_group="', 1)[1].split('"', 1)[0].split(";")[-1]
            out[group] = float(value)
    return out


def _count(prom: str, expr: str) -> int:
    url = f"{prom}/api/v1/query?{urllib.parse.urlencode({'query': f'count({expr})'})}"
    result = json.loads(_get(url))["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def costliest(prom: str, n: int = 10) -> list[dict[str, object]]:
    """The rules whose last evaluation took longest (/api/v1/rules `evaluationTime`)."""
    groups = json.loads(_get(f"{prom}/api/v1/rules"))["data"]["groups"]
    rules = [
        {"group": g["name"], "rule": r["name"], "labels": r.get("labels", {}),
         "s": round(r["evaluationTime"], 3)}
        for g in groups for r in g["rules"]]
    return sorted(rules, key=lambda r: -float(str(r["s"])))[:n]


def _wait_ready(prom: str, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            _get(f"{prom}/-/ready")
            return
        except OSError:
            time.sleep(2)
    raise TimeoutError("Prometheus never became ready")


def _watch(prom: str, lasting_rounds: int, wait_s: int) -> dict[str, object]:
    """Polls until the lasting group has finished `lasting_rounds` rounds and every other
    group three; keeps each round's duration and the load average meanwhile. A round is
    counted when it ends (Prometheus sets a group's last evaluation time then; its
    iteration counter moves when a round starts)."""
    deadline = time.monotonic() + wait_s
    ended: dict[str, float] = {}
    rounds: dict[str, list[float]] = {}
    load: list[float] = []
    while time.monotonic() < deadline:
        time.sleep(10)
        load.append(os.getloadavg()[0])
        at = _self_metric(prom, "prometheus_rule_group_last_evaluation_timestamp_seconds")
        durations = _self_metric(prom, "prometheus_rule_group_last_duration_seconds")
        for group, t in at.items():
            if t > max(ended.get(group, 0), 0):
                ended[group] = t
                rounds.setdefault(group, []).append(round(durations.get(group, 0), 3))
        lasting = len(rounds.get("headroom.lasting", []))
        others = [len(r) for g, r in rounds.items() if g != "headroom.lasting"]
        if lasting >= lasting_rounds and len(others) >= 3 and min(others) >= 3:
            break
    return {"round_durations_s": rounds,
            "load_average_1m": {"min": min(load, default=0), "max": max(load, default=0),
                                "mean": round(sum(load) / max(len(load), 1), 1)}}


def measure(containers: int, lasting_rounds: int, wait_s: int) -> dict[str, object]:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert prometheus and promtool, "needs the prometheus package"
    cgroups = node(containers)
    exporter = Exporter(exposition(cgroups))
    instance = f"127.0.0.1:{exporter.port}"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        samples, text_s, blocks_s = backfill(cgroups, instance, data, work, promtool)
        (work / "headroom.rules.yaml").write_text(rules_yaml())
        port = free_port()
        (work / "prometheus.yml").write_text(
            "global: {scrape_interval: 15s, evaluation_interval: 1m}\n"
            "rule_files: [headroom.rules.yaml]\n"
            "scrape_configs:\n- job_name: headroom\n"
            f"  static_configs: [{{targets: ['{instance}']}}]\n")
        started = time.monotonic()
        proc = subprocess.Popen(
            [prometheus, f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=30d",
             f"--storage.tsdb.max-block-duration={BLOCK_S}s"],
            stdout=subprocess.DEVNULL, stderr=(work / "prom.log").open("w"))
        prom = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(prom, 600)
            ready = time.monotonic()
            watched = _watch(prom, lasting_rounds, wait_s)
            measured = time.monotonic()
            groups = _self_metric(prom, "prometheus_rule_group_last_duration_seconds")
            written = _self_metric(prom, "prometheus_rule_group_last_evaluation_samples")
            top = costliest(prom)
            recorded = _count(prom, '{__name__=~"headroom:.+"}')
            series = _count(prom, '{__name__=~".+"}')
        finally:
            stop_all([proc])
            exporter.close()
    return {
        "containers": containers, "cgroups": len(cgroups),
        "backfilled_samples": samples,
        "phases_s": {"write_text": round(text_s), "promtool": round(blocks_s),
                     "prometheus_ready": round(ready - started),
                     "rounds": round(measured - ready)},
        **watched,
        "group_last_duration_s": groups,
        "group_last_samples": written,
        "rule_set_duration_s": round(sum(groups.values()), 3),
        "costliest_rules": top,
        "recorded_series": recorded, "series": series,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--lasting-rounds", type=int, default=2,
                    help="rounds of the 5-minute lasting group to wait for")
    ap.add_argument("--wait", type=int, default=900,
                    help="longest wait for those rounds (s)")
    args = ap.parse_args()
    for n in args.containers:
        print(json.dumps(measure(n, args.lasting_rounds, args.wait)), flush=True)


if __name__ == "__main__":
    main()
