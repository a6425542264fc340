"""One answer on every surface: the same series to ``headroom explain``, ``headroom top``
(cluster mode on Prometheus, and local mode over its own reads), the pod dashboard's
first-screen tiles, the fleet dashboard and the post-mortem page; they must agree on the
verdict, the time to limit (within rounding), the binding cgroup and what grows.

Eight pods (a fast climb, a slow leak under a daily swing, a pod-level sidecar leak,
orphaned /dev/shm, a fresh kill, a sawtooth that releases every few hours, one whose teeth
vary in height, a limit resized in place) are written as the exporter's series over 2.5 days
and turned into TSDB blocks by ``promtool tsdb create-blocks-from openmetrics``; a real
Prometheus serves them. The forecast contract's series come from the real recording rules
(the shipped alerts/headroom.rules.yaml, or ``HEADROOM_FORECAST_RULES=PATH``): ``promtool
tsdb create-blocks-from rules`` evaluates them over the whole span, one dependency level per
pass (promtool cannot feed a rule another rule's output in the same pass), each pass's
blocks loaded before the next. ``top`` without Prometheus runs the rules' Python mirror
(exporter/oncall/forecast/mirror.py) over its own reads of the same points: where it and the
rules disagree, the failing assertion names the surface and the figure.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import catalog as c
from exporter.oncall import forecast as fc
from exporter.oncall import top
from exporter.postmortem.page import render_document
from exporter.promql import LIMIT, TOP_GROWER
from tests.helpers.net import free_port, wait_http
from tests.helpers.stack import need_binaries

pytestmark = pytest.mark.prometheus

MiB, GiB = 1 << 20, 1 << 30
HOUR, DAY = 3600, 86400
NS = "llm"
INSTANCE = "node-1:9847"
SPAN = int(2.5 * DAY)
RECENT = 3 * HOUR  # the last hours at a fine step: a fast climb is minutes long
COARSE, FINE = 300, 30


def diurnal(t: float, low: float, high: float) -> float:
    """A daily swing, lowest at 03:00 of the series' day."""
    return low + (high - low) * (0.5 - 0.5 * math.cos(2 * math.pi * (t / DAY - 0.125)))


@dataclass(frozen=True)
class Cg:
    limit: float
    procs: Mapping[str, float] = field(default_factory=dict)  # anon held per process
    unmapped_shm: float = 0.0  # shmem no process maps (/dev/shm files)
    kernel: float = 64 * MiB

    @property
    def anon(self) -> float:
        return sum(self.procs.values())

    @property
    def unreclaimable(self) -> float:
        return self.anon + self.unmapped_shm + self.kernel


@dataclass(frozen=True)
class Moment:
    containers: Mapping[str, Cg]
    pod_limit: float
    pod_own_shm: float = 0.0  # charged to the pod cgroup only (a dead container's files)
    dev_shm: float = 0.0  # /dev/shm used (pod level)
    orphaned: float | None = None
    kills: float = 0.0


@dataclass(frozen=True)
class Scenario:
    pod: str
    at: Callable[[float], Moment]  # seconds since the series began
    verdict: str
    horizon: str | None  # the forecast's horizon that binds (None: no kill forecast)
    binding: str  # "" = the pod-level cgroup
    grower: str  # forecast.grower_text


def fast_climb() -> Scenario:
    """EngineCore's anon climbs 3 MiB/s for the last 20 minutes: the page's short horizon
    (explain said HEALTHY here before)."""
    def at(t: float) -> Moment:
        ramp = max(0.0, t - (SPAN - 20 * 60)) * 3 * MiB
        vllm = Cg(8 * GiB, {"APIServer": GiB, "EngineCore": 2 * GiB + ramp, "Worker_TP0": GiB})
        return Moment({"vllm": vllm}, 8 * GiB)
    return Scenario("vllm-fast-0", at, "at_risk", "short", "vllm", "EngineCore anon")


def slow_leak() -> Scenario:
    """EngineCore leaks 1.5 GiB a day under the API server's daily swing of 4 GiB: the
    lasting horizon, whatever the hour."""
    def at(t: float) -> Moment:
        vllm = Cg(24 * GiB, {"APIServer": diurnal(t, 2 * GiB, 6 * GiB),
                             "EngineCore": 4 * GiB + 1.5 * GiB * t / DAY,
                             "Worker_TP0": 3 * GiB})
        return Moment({"vllm": vllm}, 24 * GiB)
    return Scenario("vllm-leak-0", at, "at_risk", "lasting", "vllm", "EngineCore anon")


def sidecar_leak() -> Scenario:
    """A sidecar without a limit of its own leaks 2.5 GiB a day: the pod-level cgroup's
    limit binds, and the sidecar's process is what grows."""
    def at(t: float) -> Moment:
        vllm = Cg(36 * GiB, {"APIServer": GiB, "EngineCore": 4 * GiB, "Worker_TP0": 8 * GiB})
        side = Cg(40 * GiB, {"cache-daemon": 6 * GiB + 2.5 * GiB * t / DAY}, kernel=0)
        return Moment({"vllm": vllm, "sidecar": side}, 36 * GiB)
    return Scenario("vllm-side-0", at, "at_risk", "lasting", "", "cache-daemon anon")


def orphaned_shm() -> Scenario:
    """Each worker crash leaves its /dev/shm files: 2 GiB a day of files no process holds,
    charged to the pod cgroup."""
    def at(t: float) -> Moment:
        left = 3 * GiB + 2 * GiB * t / DAY
        vllm = Cg(32 * GiB, {"APIServer": GiB, "EngineCore": 3 * GiB, "Worker_TP0": 6 * GiB})
        return Moment({"vllm": vllm}, 32 * GiB, pod_own_shm=left, dev_shm=left + 64 * MiB,
                      orphaned=left)
    return Scenario("vllm-shm-0", at, "at_risk", "lasting", "", "/dev/shm (no process)")


KILL_AGO = 5 * 60


def fresh_kill() -> Scenario:
    """EngineCore climbed 4 MiB/s into its 6 GiB limit and was killed 5 minutes ago;
    vLLM came back at 3 GiB and is flat since."""
    kill = SPAN - KILL_AGO

    def at(t: float) -> Moment:
        climb = max(0.0, t - (kill - 16 * 60)) * 4 * MiB if t < kill else 0.0
        engine = 1.5 * GiB + climb
        vllm = Cg(6 * GiB, {"APIServer": GiB, "EngineCore": min(engine, 4.9 * GiB),
                            "Worker_TP0": 0.0})
        return Moment({"vllm": vllm}, 6 * GiB, kills=1.0 if t >= kill else 0.0)
    # No horizon forecasts a kill (the floor did not rise, nothing climbs now); the top
    # grower (the last hour's deriv, as the rule reads it) is still the climb.
    return Scenario("vllm-killed-0", at, "at_risk", None, "vllm", "EngineCore anon")


PERIOD = 4 * HOUR


def sawtooth() -> Scenario:
    """EngineCore's anon climbs 4 GiB over 4 h and is released, every 4 h, for days; the
    moment is half-way up a tooth. The teeth reach the same peaks every time: no kill is
    forecast (a tooth below the peaks' envelope is the pattern, not a climb into the
    limit), what grows now is still EngineCore."""
    def at(t: float) -> Moment:
        tooth = ((t + PERIOD / 2) % PERIOD) / PERIOD * 4 * GiB
        vllm = Cg(16 * GiB, {"APIServer": GiB, "EngineCore": 3 * GiB + tooth,
                             "Worker_TP0": 2 * GiB})
        return Moment({"vllm": vllm}, 16 * GiB)
    return Scenario("vllm-saw-0", at, "healthy", None, "vllm", "EngineCore anon")


IRREGULAR_HEIGHTS_GIB = (3.2, 4.6, 3.8, 4.2, 3.4, 4.8)


def irregular_teeth() -> Scenario:
    """The same cache with teeth of irregular height (flushed on load, not on a clock):
    3.2-4.8 GiB, six a day, and the last 5.6 GiB, 90 % up it at the moment and 0.24 GiB
    above every peak of the day. Within what teeth that irregular make (the tallest fall
    and its share of their range, TOOTH_CREST, plus two of that share): the pattern, not
    a climb into the limit; no horizon forecasts a kill."""
    def at(t: float) -> Moment:
        phase = t + 0.9 * PERIOD
        n = int(phase // PERIOD)
        last = n == int((SPAN + 0.9 * PERIOD) // PERIOD)
        height = (5.6 if last else IRREGULAR_HEIGHTS_GIB[n % 6]) * GiB
        tooth = (phase % PERIOD) / PERIOD * height
        vllm = Cg(16 * GiB, {"APIServer": GiB, "EngineCore": 3 * GiB + tooth,
                             "Worker_TP0": 2 * GiB})
        return Moment({"vllm": vllm}, 16 * GiB)
    return Scenario("vllm-jagged-0", at, "healthy", None, "vllm", "EngineCore anon")


RESIZED_AGO = 2 * HOUR


def resized_limit() -> Scenario:
    """EngineCore leaks 1.5 GiB a day; the limit was raised in place (VPA) from 8 to
    12 GiB two hours ago: every forecast is against the 12 GiB in force now."""
    def at(t: float) -> Moment:
        limit = 8 * GiB if t < SPAN - RESIZED_AGO else 12 * GiB
        vllm = Cg(limit, {"APIServer": GiB, "EngineCore": 1.5 * GiB + 1.5 * GiB * t / DAY,
                          "Worker_TP0": GiB})
        return Moment({"vllm": vllm}, limit)
    return Scenario("vllm-vpa-0", at, "at_risk", "lasting", "vllm", "EngineCore anon")


KILLED = fresh_kill()
SCENARIOS = (fast_climb(), slow_leak(), sidecar_leak(), orphaned_shm(), KILLED,
             sawtooth(), irregular_teeth(), resized_limit())


# --- the scenarios as the exporter's series --------------------------------------------------
Series = dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]]


def times() -> list[int]:
    # Each coarse sample with a second one FINE later: the stack's Prometheus looks back
    # 59 s, and promtool evaluates the rules at an offset within the minute that follows
    # from the rules file's path (the pytest temp folder). Where that offset falls in the
    # minute's last second, a lone sample on a whole minute is seen by no instant read at
    # those instants (explain's range queries: its mirror then saw 3 hours, not 2.5
    # days); a pair is seen at every offset.
    coarse = [u for t in range(0, SPAN - RECENT, COARSE) for u in (t, t + FINE)]
    return coarse + list(range(SPAN - RECENT, SPAN + 1, FINE))


def cgroups(m: Moment) -> dict[str, tuple[float, dict[str, float], dict[str, float]]]:
    """container -> (limit, kinds, processes); "" = the pod cgroup, which holds all."""
    out: dict[str, tuple[float, dict[str, float], dict[str, float]]] = {}
    for name, cg in m.containers.items():
        out[name] = (cg.limit, {"anon": cg.anon, "shmem": cg.unmapped_shm,
                                "kernel": cg.kernel}, dict(cg.procs))
    kinds = {k: sum(v[1][k] for v in out.values()) for k in ("anon", "shmem", "kernel")}
    kinds["shmem"] += m.pod_own_shm
    kinds["kernel"] += 16 * MiB
    procs = {p: v for _, (_, _, ps) in out.items() for p, v in ps.items()}
    out[""] = (m.pod_limit, kinds, procs)
    return out


def raw_series(sc: Scenario, end: float) -> Series:
    out: Series = {}

    def put(metric: str, labels: dict[str, str], t: float, v: float) -> None:
        key = (metric, tuple(sorted({"job": "headroom", "instance": INSTANCE, **labels}
                                    .items())))
        out.setdefault(key, []).append((t, v))

    for t in times():
        ts = end - SPAN + t
        m = sc.at(t)
        for cont, (limit, kinds, procs) in cgroups(m).items():
            w = {"namespace": NS, "pod": sc.pod, "container": cont}
            put(c.MEMORY_LIMIT_BYTES.name, w, ts, limit)
            put(c.MEMORY_UNRECLAIMABLE_BYTES.name, w, ts, sum(kinds.values()))
            for k, v in kinds.items():
                put(c.MEMORY_BYTES.name, {**w, "kind": k}, ts, v)
            if cont:
                for p, v in procs.items():
                    put(c.PROCESS_COUNT.name, {**w, "process": p}, ts, 1.0)
                    put(c.PROCESS_MEMORY_BYTES.name, {**w, "process": p, "kind": "rss_anon"},
                        ts, v)
                    put(c.PROCESS_MEMORY_BYTES.name,
                        {**w, "process": p, "kind": "rss_shmem"}, ts, 0.0)
        pw = {"namespace": NS, "pod": sc.pod, "container": ""}
        put(c.OOM_KILLS_TOTAL.name, {**pw, "process": "EngineCore"}, ts, m.kills)
        if m.dev_shm:
            put(c.TMPFS_USED_BYTES.name, {**pw, "mount": "/dev/shm"}, ts, m.dev_shm)
        if m.orphaned is not None:
            put(c.TMPFS_ORPHANED_BYTES.name, {**pw, "mount": "/dev/shm"}, ts, m.orphaned)
    return out


def histories(sc: Scenario, end: float, until: float) -> list[fc.History]:
    """The scenario's points up to ``until`` as the mirror reads them."""
    pts: dict[str, dict[str, Any]] = {}
    for t in times():
        ts = end - SPAN + t
        if ts > until:
            break
        m = sc.at(t)
        for cont, (limit, kinds, procs) in cgroups(m).items():
            h = pts.setdefault(cont, {"limit": limit, "u": [], "kinds": {}, "procs": {}})
            h["u"].append((ts, sum(kinds.values())))
            for k, v in kinds.items():
                h["kinds"].setdefault(k, []).append((ts, v))
            if cont == "" and m.dev_shm:
                h["kinds"].setdefault("dev_shm", []).append((ts, m.dev_shm))
            for p, v in procs.items():
                h["procs"].setdefault(p, []).append((ts, v))
    return [fc.History(NS, sc.pod, cont, h["limit"], h["u"], h["kinds"], h["procs"])
            for cont, h in pts.items()]


def openmetrics(series: Series) -> str:
    by_metric: dict[str, list[str]] = {}
    for (metric, labels), pts in sorted(series.items()):
        lb = ",".join(f'{k}="{v}"' for k, v in labels)
        by_metric.setdefault(metric, []).extend(
            f"{metric}{{{lb}}} {v:.17g} {t:.3f}" for t, v in sorted(pts))
    lines: list[str] = []
    for metric, rows in sorted(by_metric.items()):
        lines.append(f"# TYPE {metric} gauge")
        lines += rows
    return "\n".join([*lines, "# EOF"]) + "\n"


# --- the stack ---------------------------------------------------------------------------------
@dataclass
class Stack:
    prom: str
    end: float  # the last raw sample
    tmp: Path
    at: float = 0.0  # the rules' last evaluation: the moment every surface is asked about


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    need_binaries("prometheus", "promtool")
    tmp = tmp_path_factory.mktemp("one-answer")
    end = float(int(time.time()) // 60 * 60 - 120)  # whole minutes, inside the lookback
    raw: Series = {}
    for sc in SCENARIOS:
        raw.update(raw_series(sc, end))
    rules = Path(os.environ.get("HEADROOM_FORECAST_RULES",
                                ROOT / "alerts" / "headroom.rules.yaml"))
    om = tmp / "series.om"
    om.write_text(openmetrics(raw))
    tsdb = tmp / "tsdb"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                    str(om), str(tsdb)], check=True, timeout=600)
    (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp / "prometheus.log").open("wb")

    # A rule that stops recording a series (no growth any more) makes Prometheus write a
    # staleness marker; backfilled blocks have none, so the last sample would stay
    # visible for the default 5 min lookback, to the next level's rules and to the
    # surfaces. A lookback just under the rules' interval: what the last evaluation
    # recorded, and only that.
    def start(lookback: str = "59s") -> subprocess.Popen[bytes]:
        p = subprocess.Popen(
            ["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tsdb}", "--storage.tsdb.retention.time=30d",
             f"--query.lookback-delta={lookback}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
            stderr=log)
        wait_http(f"{url}/-/ready", p)
        return p

    proc = start()
    try:
        for i, level in enumerate(rule_levels(rules)):
            # Each level reads only what earlier passes wrote: evaluate it, load it. One
            # group name and file for every level: the evaluation times follow from
            # them, so every level is evaluated at the same instants (as one group of
            # Prometheus' is) and reads the level before at that instant.
            f = tmp / "forecast.rules.yaml"
            f.write_text(yaml.safe_dump({"groups": [{"name": "forecast",
                                                     "rules": level}]}))
            out = tmp / f"blocks-{i}"
            subprocess.run(["promtool", "tsdb", "create-blocks-from", "rules",
                            f"--url={url}", f"--start={int(end - SPAN)}",
                            f"--end={int(end)}", "--eval-interval=60s",
                            f"--output-dir={out}", str(f)],
                           check=True, timeout=600, capture_output=True)
            proc.terminate()
            proc.wait(timeout=20)
            for block in out.iterdir():
                shutil.move(str(block), tsdb / block.name)
            proc = start()
        st = Stack(url, end, tmp)
        (last,) = query_at(st, f"max(timestamp({LIMIT}))", end)
        st.at = last.value
        yield st
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def rule_levels(path: Path) -> list[list[dict[str, Any]]]:
    """The recording rules of a rules file by dependency level: a rule's level is one
    above the highest level of the recorded series it reads."""
    recording = [r for g in yaml.safe_load(path.read_text())["groups"]
                 for r in g["rules"] if "record" in r]
    names = {r["record"] for r in recording}
    level: dict[str, int] = {}
    for _ in range(len(recording)):
        for r in recording:
            deps = {n for n in names if re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])",
                                                  r["expr"]) and n != r["record"]}
            level[r["record"]] = max(
                level.get(r["record"], 0),
                1 + max((level.get(d, 0) for d in deps), default=-1))
    out: list[list[dict[str, Any]]] = [[] for _ in range(max(level.values()) + 1)]
    for r in recording:
        out[level[r["record"]]].append({k: r[k] for k in ("record", "expr", "labels")
                                        if k in r})
    return out


# --- the five surfaces ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    surface: str
    verdict: str | None  # None: the surface has no verdict of its own
    ttl: float | None
    horizon: str | None
    grower: str
    binding: str | None = None
    extra: str = ""
    grower_rate: float | None = None  # B/s of the grower, where the surface gives one


def explain_doc(st: Stack, sc: Scenario) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "exporter.cli", "explain", f"{NS}/{sc.pod}",
                        f"--prometheus.url={st.prom}", "--output=json", f"--time={st.at}"],
                       capture_output=True, text=True, timeout=120)
    assert r.stdout, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def explain_answer(st: Stack, sc: Scenario) -> Answer:
    doc = explain_doc(st, sc)
    cl = doc["closeness"]
    # "What grows" opens with the top grower when something grows (the page's wording).
    top_row = next((g for g in doc["growth"] if g["what"] == "grower"), None)
    return Answer("explain", doc["verdict"], cl["time_to_limit_s"], cl["horizon"],
                  cl["grower"] or "-", cl["container"], json.dumps(doc["kills"]),
                  top_row["rate"] if top_row else None)


def page_grower(st: Stack, sc: Scenario) -> Answer:
    """What the page's text says grows: the TOP_GROWER series its template queries (the
    binding cgroup's; alerts/rules.py ``_top_grower``)."""
    rows = [r for r in query_at(st, f'{TOP_GROWER}{{pod="{sc.pod}"}}') if r.value > 0]
    if not rows:
        return Answer("page", None, None, None, "-")
    (r,) = rows
    g = fc.Grower(r.labels.get("kind", ""), r.labels.get("process", ""), r.value)
    return Answer("page", None, None, None, fc.grower_text(g),
                  r.labels.get("container", ""), grower_rate=r.value)


def top_cluster_answers(st: Stack) -> dict[str, Answer]:
    qs = top.cluster_queries()
    answers = {k: query_at(st, q) for k, q in qs.items()}
    rows, _ = top.cluster_rows(top.cluster_of(answers))
    return {r.pod: Answer("top --prometheus", None, r.ttl, r.horizon, r.grower,
                          "" if r.cgroup == "(pod)" else r.cgroup,
                          "killed" if r.kill else "") for r in rows}


def query_at(st: Stack, expr: str, at: float | None = None) -> list[Any]:
    from exporter.oncall.prom_client import parse_vector
    data = urllib.parse.urlencode({"query": expr, "time": at or st.at}).encode()
    with urllib.request.urlopen(f"{st.prom}/api/v1/query", data, timeout=60) as r:
        return parse_vector(json.load(r))


def local_read(m: Moment, pod: str) -> top.Pod:
    """One read of the local exporter by top at a scenario moment: the pod's cgroups, its
    processes (one of each name), /dev/shm, orphaned files and kills."""
    cgs = tuple(top.Cgroup(cont, limit, sum(kinds.values()), None, kinds)
                for cont, (limit, kinds, _) in cgroups(m).items())
    procs = tuple(top.Proc(cont, p, v, count=1) for cont, cg in m.containers.items()
                  for p, v in cg.procs.items())
    return top.Pod(NS, pod, cgs, m.dev_shm or None, m.orphaned, None, procs, m.kills,
                   "http://" + INSTANCE)


def local_state(st: Stack, sc: Scenario) -> tuple[top.State, top.Pod]:
    """top without Prometheus after its own reads of the scenario's points up to the
    moment the rules were last evaluated: its state and its last read."""
    state = top.State("local")
    pod: top.Pod | None = None
    for t in times():
        ts = st.end - SPAN + t
        if ts > st.at:
            break
        pod = local_read(sc.at(t), sc.pod)
        top.apply(state, top.Read(ts, pods={pod.key: pod}))
    assert pod is not None
    return state, pod


def top_local_answer(st: Stack, sc: Scenario) -> Answer:
    """top without Prometheus: its own reads of the same points, through its state, and
    its forecast at the moment the rules were last evaluated."""
    state, pod = local_state(st, sc)
    # Forecast at the rules' instant over the reads so far (not at top's last step; a
    # read at that instant would add a point the exporter never scraped).
    state.cgroups = top.local_forecasts({pod.key: pod}, state.hist, st.at)
    state.rows = top.local_rows({pod.key: pod}, state.cgroups, state.kills)
    (row,) = state.rows
    return Answer("top (local)", None, row.ttl, row.horizon, row.grower,
                  "" if row.cgroup == "(pod)" else row.cgroup, "killed" if row.kill else "")


def dashboard_answer(st: Stack, sc: Scenario) -> Answer:
    d = json.loads((Path(__file__).parents[2] / "dashboards" / "headroom-pod.json")
                   .read_text())
    tiles = {p["title"]: p for p in d["panels"] if p["type"] == "stat"}
    values = {"job": "headroom", "namespace": NS, "pod": sc.pod, "container": ".*"}

    def tile(title: str) -> tuple[str, float] | None:
        t = tiles[title]["targets"][0]
        expr = t["expr"]
        for k, v in values.items():
            expr = expr.replace(f"${{{k}}}", v).replace(f"${k}", v)
        rows = query_at(st, expr)
        if not rows:
            return None
        # Grafana's legend: a label the series lacks (Prometheus drops empty ones) is "".
        name = re.sub(r"\{\{\s*(\w+)\s*\}\}",
                      lambda m: rows[0].labels.get(m.group(1), ""), t["legendFormat"])
        return name.strip(), rows[0].value

    ttl, grow = tile("Time to limit"), tile("Top grower")
    grower = "-"
    if grow is not None:
        process, _, kind = grow[0].rpartition(" ")
        grower = fc.grower_text(fc.growing(fc.Grower(kind, process, grow[1])))
    return Answer("dashboard", None, ttl[1] if ttl else None, ttl[0] if ttl else None,
                  grower, grower_rate=grow[1] if grow else None)


def fleet_answer(st: Stack, sc: Scenario) -> Answer:
    """The fleet dashboard's time-to-limit line and top-grower bar of the pod (the
    legends name the binding cgroup, the horizon, the process and kind)."""
    d = json.loads((ROOT / "dashboards" / "headroom-fleet.json").read_text())
    panels = {p["title"]: p for p in d["panels"]}
    values = {"job": "headroom", "namespace": NS, "scope": VLLM_SCOPE, "__range": "1d"}

    def rows(title: str) -> tuple[list[Any], str]:
        t = panels[title]["targets"][0]
        expr = t["expr"]
        for k, v in values.items():
            expr = expr.replace(f"${{{k}}}", v).replace(f"${k}", v)
        return [r for r in query_at(st, expr) if r.labels.get("pod") == sc.pod], \
            t["legendFormat"]

    ttl, _ = rows("Time to limit: the 10 closest pods")
    grow, _ = rows("Top growers")
    binding = None
    if ttl:
        binding = ttl[0].labels.get("container", "")
        binding = "" if binding == "pod cgroup" else binding
    grower, rate = "-", None
    if grow:
        lb = grow[0].labels
        grower = fc.grower_text(fc.Grower(lb.get("kind", ""), lb.get("process", ""),
                                          grow[0].value))
        rate = grow[0].value
    return Answer("fleet dashboard", None, ttl[0].value if ttl else None,
                  ttl[0].labels.get("horizon") if ttl else None, grower, binding,
                  grower_rate=rate)


VLLM_SCOPE = "APIServer.*|EngineCore.*|Worker.*|DPCoordinator.*"


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.pod for s in SCENARIOS])
def test_every_surface_gives_one_answer(stack: Stack, sc: Scenario) -> None:
    cluster = top_cluster_answers(stack)
    answers = [explain_answer(stack, sc), cluster[sc.pod], top_local_answer(stack, sc),
               dashboard_answer(stack, sc), fleet_answer(stack, sc)]
    page = page_grower(stack, sc)
    print(f"\n{sc.pod}:")
    for a in [*answers, page]:
        print(f"  {a.surface:<18} verdict={a.verdict} ttl={a.ttl} horizon={a.horizon} "
              f"grower={a.grower!r} rate={a.grower_rate} binding={a.binding!r}")
    # One answer: every surface says what explain (the recorded series) says; top's
    # local mode is the rules' mirror, so a rule and its mirror that differ fail here.
    ref = answers[0]
    for a in [*answers[1:], page]:
        assert (a.grower, a.binding if a.binding is not None else ref.binding) == \
            (ref.grower, ref.binding), a
        if a is page:
            continue
        assert a.horizon == ref.horizon, a
        assert (a.ttl is None) == (ref.ttl is None), a
        if a.ttl is not None:
            assert a.ttl == pytest.approx(ref.ttl, rel=0.01), a
    # What grows at the page's rate, on explain and the dashboards.
    for a in (answers[0], answers[3], answers[4]):
        assert a.grower_rate == pytest.approx(page.grower_rate, rel=1e-6), a
    # The right answer.
    assert (ref.verdict, ref.horizon, ref.grower, ref.binding) == \
        (sc.verdict, sc.horizon, sc.grower, sc.binding), ref


def test_a_fresh_kill_reads_the_same_on_every_surface(stack: Stack) -> None:
    """The kill: explain says when (to the step) and what grew before it, top marks the
    row, and the post-mortem page's headline names the same process."""
    sc = KILLED
    kill = stack.end - KILL_AGO
    ex = explain_answer(stack, sc)
    (k,) = json.loads(ex.extra)
    assert k["when"] == pytest.approx(kill, abs=FINE + 15), k
    assert k["age_s"] == pytest.approx(stack.at - kill, abs=FINE + 15)
    assert k["grew"].startswith("EngineCore +"), k
    assert re.search(r"in the 1[56] min before it \(\+(3\.9|4\.0) MiB/s\)", k["grew"]), k
    assert top_cluster_answers(stack)[sc.pod].extra == "killed"
    assert top_local_answer(stack, sc).extra == "killed"
    # The post-mortem document of that kill, from the same points (1 s readings).
    (h,) = [h for h in histories(sc, stack.end, kill - 1) if h.container == "vllm"]
    usage = [[t, v] for t, v in h.unreclaimable if t >= kill - 900]
    scrapes = [{"time": t, "limit": 6 * GiB, "usage": v, "unreclaimable": v,
                "kinds": {"anon": v - 64 * MiB, "kernel": 64 * MiB},
                "processes": [{"process": p, "count": 1, "rss_anon": dict(pts)[t],
                               "rss_shmem": 0} for p, pts in h.processes.items()]}
               for t, v in h.unreclaimable if t >= kill - 900]
    doc = {"kind": "headroom.oom_kill/v1", "time": kill, "namespace": NS, "pod": sc.pod,
           "container": "vllm", "victim": {"process": "EngineCore", "pid": 7},
           "window_seconds": 900, "usage": usage, "scrapes": scrapes}
    page = render_document("x.json", doc)
    assert re.search(r"EngineCore grew \+3\.\d GiB in the 1[56] min before it "
                     r"\(\+(3\.9|4\.0) MiB/s\)", page), page[:2000]


def test_without_the_recording_rules_explain_computes_the_same_forecast_itself(
    stack: Stack,
) -> None:
    """explain's fallback (the rules' mirror over Prometheus' raw series, read as range
    queries) gives the recorded forecast for every pod."""
    import asyncio

    from exporter.oncall import explain as x
    from exporter.oncall.prom_client import PromClient

    async def local(sc: Scenario) -> fc.Forecast | None:
        async with PromClient(stack.prom) as prom:
            ev = await x.fetch(prom, NS, sc.pod, "", stack.at)
            span = 2 * fc.Windows.of().baseline + x.HISTORY_MARGIN
            qs = x.range_queries(NS, sc.pod)
            got = [await prom.query_range(q, stack.at - span, stack.at, x.RANGE_STEP)
                   for q in qs.values()]
        hist = x.histories(ev, dict(zip(qs, got, strict=True)))
        return fc.tightest(fc.pod_forecasts(hist, stack.at))

    swings = 0
    for sc in SCENARIOS:
        f = asyncio.run(local(sc))
        recorded = explain_answer(stack, sc)
        assert f is not None and f.horizon == recorded.horizon, (sc.pod, f, recorded)
        assert fc.grower_text(f.grower) == recorded.grower, (sc.pod, f.grower)
        if f.time_to_limit is not None:
            assert f.time_to_limit == pytest.approx(recorded.ttl, rel=0.05), sc.pod
        # The peaks' distance to the limit in quiet swings: the same noise band verdict
        # on every surface. These series have no noise: the quiet hours' deviation from
        # their trend line is rounding or a daily swing's curvature near its
        # inflection, bytes against gigabytes, so the figure (absent, or hundreds of
        # swings) is not compared; on a noisy series the mirror's is pinned in
        # test_top_model.py and the rules' in promtool (filling_up_noise_band).
        rec = explain_doc(stack, sc)["closeness"]["peak_swings"]
        assert f.in_noise_band == (rec is not None and rec < fc.NOISE_BAND_SWINGS), sc.pod
        swings += rec is not None
    assert swings >= 3  # the leaks: the lasting horizon sees growth


def test_top_shows_the_same_process_view_in_both_modes(stack: Stack) -> None:
    """The process view (Enter on a pod): cluster mode reads each process's memory and
    the recorded PROCESS_GROWTH; local mode its own reads and that rule's mirror. Both
    list the same processes with the same growth and the limit."""
    sc = next(s for s in SCENARIOS if s.pod == "vllm-vpa-0")
    qs = top.cluster_queries()
    cluster = top.State("prometheus")
    top.apply(cluster, top.Read(stack.at, cluster=top.cluster_of(
        {k: query_at(stack, q) for k, q in qs.items()})))
    local, _ = local_state(stack, sc)

    def view(st: top.State) -> dict[str, list[str]]:
        st.detail = (NS, sc.pod)
        lines = [text for text, _ in top.draw(st, 160, 50, stack.at)]
        start = next(i for i, ln in enumerate(lines) if ln.startswith("CONTAINER"))
        return {ln.split()[1]: ln.split()[2:] for ln in lines[start + 1:] if ln.strip()
                and not ln.startswith(("t u g", "Esc"))}

    got, mine = view(cluster), view(local)
    print("\ncluster:", got, "\nlocal:  ", mine)
    assert set(got) == {"APIServer", "EngineCore", "Worker_TP0"}, got
    # N, anon (2 words), shmem (2), growth (2), limit (2).
    assert got["EngineCore"][-4:] == ["+1.5", "GiB/day", "12.0", "GiB"], got
    assert mine["EngineCore"][-4:] == got["EngineCore"][-4:], mine
    for name in got:
        assert (got[name][:3], got[name][-2:]) == (mine[name][:3], mine[name][-2:]), name
