"""The synthetic node of the rule benchmark (`benchmarks.rule_cost`): its exposition,
the history its rules read backfilled with promtool, and a real Prometheus over both
(`benchmarks.rule_cost` says what the node holds and why the history is what it is).
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

from exporter import catalog as c
from exporter import promql as q
from tests.helpers.net import free_port, stop_all

GiB = 1024**3
MiB = 1024**2
MINUTE, HOUR, DAY = 60, 3600, 86400
PROCESSES = ("APIServer", "EngineCore", "Worker_TP0")
# The share of unreclaimable memory per kind and per process (anon, shmem).
KINDS = (("anon", 0.6), ("shmem", 0.3), ("kernel", 0.05), ("sock", 0.01))
# As headroom:memory_kind:bytes records them: socket buffers folded into kernel.
RECORDED_KINDS = (("anon", 0.6), ("shmem", 0.3), ("kernel", 0.06))
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
                         for cg in cgroups for k, share in RECORDED_KINDS),
        "process": lambda: ((f'{cg.labels},process="{p}"', sum(PROCESS_SHARE) * cg.level,
                             cg.leak if p == "EngineCore" else 0.0)
                            for cg in ctr for p in PROCESSES),
        "tmpfs": lambda: ((f'{cg.labels},mount="/dev/shm"', float(GiB), 0.0) for cg in pods),
        "one": lambda: ((cg.labels, 1.0, 0.0) for cg in ctr),
        "range": lambda: ((cg.labels, 10**JITTER_DIGITS, 0.0) for cg in cgroups),
        "zero": lambda: ((cg.labels, 0.0, 0.0) for cg in cgroups),
    }


def _day_ago(hours: float = 1, step: int = MINUTE) -> Span:
    return DAY + int(hours * HOUR) + 2 * step, DAY - step, step


RECENT_HOUR: Span = (HOUR + MINUTE, 0, MINUTE)
LASTING_S = 300  # the lasting group's interval: the breakdown's figures are that far apart
RECENT_HOUR_LASTING: Span = (HOUR + LASTING_S, 0, LASTING_S)
# A lasting figure read a day ago (last_over_time([15m] offset 1d)), and the guard that
# the series spans both windows (present_over_time([15m] offset 2d1h45m)).
A_DAY_AGO_HELD: Span = (DAY + 20 * MINUTE, DAY - 5 * MINUTE, LASTING_S)
SPANS_GUARD: Span = (2 * DAY + 2 * HOUR + 5 * MINUTE, 2 * DAY + HOUR + 40 * MINUTE, LASTING_S)
# Family -> its rows and the spans the rules read (windows plus offsets, rounded up to
# a step), from alerts/headroom.rules.yaml.
HISTORY: tuple[tuple[str, str, tuple[Span, ...]], ...] = (
    # max_over_time(oom_kill[1h] offset 10m), rate(max[15m])
    (c.MEMORY_EVENTS_TOTAL.name, "events", ((HOUR + 12 * MINUTE, 0, 15),)),
    # deriv[30m], max_over_time[5m] offset 1h, max_over_time[1h] (hourly maxima), and
    # the hourly minimum's warm-up guard (present_over_time[15m] offset 1h45m)
    (q.UNRECLAIMABLE, "level", ((2 * HOUR + 2 * MINUTE, 0, MINUTE),)),
    (q.WORKING_SET, "working_set", (RECENT_HOUR,)),  # min_over_time[1h]
    # The breakdown (the lasting group): deriv[1h], avg_over_time[1h] offset 1d.
    (q.HIDDEN, "hidden", (RECENT_HOUR_LASTING, _day_ago(step=LASTING_S))),
    (q.SLOPE_SHORT, "slope", ((7 * MINUTE, 0, MINUTE),)),  # min_over_time[6m]
    (q.SLOPE_MEDIUM, "slope", ((31 * MINUTE, 0, MINUTE),)),  # min_over_time[30m]
    (q.GROWTH + "\thorizon=medium", "leak", ((16 * MINUTE, 0, MINUTE),)),  # instant
    (q.MEMORY_KIND, "kind", (RECENT_HOUR_LASTING, _day_ago(step=LASTING_S))),
    (q.PROCESS_MEMORY, "process", (RECENT_HOUR_LASTING, _day_ago(step=LASTING_S))),
    # predict_linear[6h], deriv[1h], avg_over_time[1h] offset 1d
    (q.TMPFS_USED, "tmpfs", ((6 * HOUR + MINUTE, 0, MINUTE), _day_ago())),
    (q.TMPFS_PREDICTED, "tmpfs", ((15 * MINUTE, 0, LASTING_S),)),  # last_over_time[15m]
    (q.VLLM_UP, "one", (RECENT_HOUR,)),  # max_over_time[1h]
    # The lasting group, every 5 min: the floors and the envelope over [1d] (the
    # maxima an hour later, and a day ahead of the pattern), their own figures a day
    # ago ([15m] offset 1d), the guard present_over_time[15m] offset 2d1h45m, and a
    # day of what grew and of vLLM's answers.
    (q.HOURLY_MAX, "level", ((DAY + 2 * HOUR, 0, LASTING_S), SPANS_GUARD)),
    (q.HOURLY_MIN, "level", ((15 * MINUTE, 0, LASTING_S),)),
    # The floor over [1d], and its cover: counted over [1d] and [1d] offset 1d.
    (q.SETTLED_HOURLY_MIN, "level", ((2 * DAY + 5 * MINUTE, 0, LASTING_S),)),
    (q.HIDDEN_HOURLY_MIN, "hidden", ((DAY + 5 * MINUTE, 0, LASTING_S),)),
    (q.WORKING_SET_HOURLY_MIN, "working_set", ((DAY + 5 * MINUTE, 0, LASTING_S),)),
    (q.UNRECLAIMABLE_BASELINE, "level", (A_DAY_AGO_HELD,)),
    (q.HIDDEN_BASELINE, "hidden", (A_DAY_AGO_HELD,)),
    (q.PEAK_ENVELOPE, "level", ((15 * MINUTE, 0, LASTING_S), A_DAY_AGO_HELD)),
    (q.GROWTH + "\thorizon=lasting", "leak", ((DAY + 5 * MINUTE, 0, LASTING_S),)),
    (q.GREW, "leak", ((DAY + 5 * MINUTE, 0, LASTING_S),)),  # max_over_time[1d]
    (q.VLLM_ANSWERED, "one", ((DAY + 5 * MINUTE, 0, LASTING_S),)),  # max_over_time[1d]
    (q.HOURLY_RANGE, "range", ((15 * MINUTE, 0, LASTING_S),)),
    (q.SHARP_RELEASE, "zero", ((DAY + 5 * MINUTE, 0, LASTING_S),)),  # changes[1d]
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


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as r:
        body: bytes = r.read()
    return body


def self_metric(prom: str, name: str) -> dict[str, float]:
    """Rule group -> value of one of Prometheus' own metrics, from its /metrics (a
    Prometheus without a self-scrape job has none of them in its TSDB)."""
    out = {}
    for line in fetch(f"{prom}/metrics").decode().splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            group = labels.split('rule_group="', 1)[1].split('"', 1)[0].split(";")[-1]
            out[group] = float(value)
    return out


def _wait_ready(prom: str, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            fetch(f"{prom}/-/ready")
            return
        except OSError:
            time.sleep(2)
    raise TimeoutError("Prometheus never became ready")


@dataclass(frozen=True)
class Backfilled:
    """A ready Prometheus over a synthetic node and its backfilled history."""

    prom: str  # its URL
    cgroups: int  # the node's (containers and their pods)
    samples: int  # backfilled
    text_s: float  # writing the history's text
    blocks_s: float  # converting it into blocks
    started: float  # time.monotonic() when Prometheus was started
    ready: float  # ... and when it answered ready


@contextmanager
def prometheus_over_history(containers: int, rules: dict[str, str]) -> Iterator[Backfilled]:
    """A synthetic exporter of ``containers`` containers, its history backfilled, scraped
    every 15 s by a real Prometheus that evaluates ``rules`` (file name -> YAML) every
    minute, with blocks of ``BLOCK_S`` at most (no compaction meanwhile); stopped on exit."""
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
        for name, text in rules.items():
            (work / name).write_text(text)
        port = free_port()
        (work / "prometheus.yml").write_text(
            "global: {scrape_interval: 15s, evaluation_interval: 1m}\n"
            f"rule_files: [{', '.join(rules)}]\n"
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
            yield Backfilled(prom, len(cgroups), samples, text_s, blocks_s, started,
                             time.monotonic())
        finally:
            stop_all([proc])
            exporter.close()
