"""The pod dashboard's first screen, read from a real run (tier 5 + 7).

``headroom serve`` on a real cgroup tree (cgroup v1 here), a real Prometheus (1 s scrape
and evaluation, the shipped rules with every window shrunk by ``SCALE``, as the alerting
e2e does) and the dashboards drawn for that same scaled config. A pod under a 192 MiB
limit runs two processes in one container: ``VLLM::EngineCore`` leaks anonymous memory,
``VLLM::Worker_TP0`` keeps some page cache hot and appends to a /dev/shm file it never
maps (memory no process accounts for). The kernel OOM-kills EngineCore.

Then every first-screen tile is evaluated as Grafana would (an instant query at the end
of the dashboard's range) shortly before the kill: each must show the danger with the
thresholds the dashboard carries, the growing process must be named with its rate; after
the kill the OOM count must read 1 (cgroup v1 counts the kill only in the container's
cgroup: a pod-level count reads 0). The values are printed (``-s``) and, with
``HEADROOM_DASHBOARD_RUN=path.json``, every first-screen query of every dashboard is saved
for ``scripts/render_dashboards.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alerts.generate import rules_yaml
from dashboards import generate, layout, selectors
from exporter.promql import CONFIG, HEADROOM
from tests.helpers.kernel import end, kube_tree
from tests.helpers.net import free_port, stop_all, wait_http
from tests.helpers.stack import need_kernel_and, prometheus_yml, serve_on_tree, start_prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.kernel]

MiB = 1 << 20
SCALE = 360  # as the alerting e2e: 1 h -> 10 s, 1 d -> 4 min
# The rules hold a recorded figure across scrape gaps (hold_s, 10 min shipped, 2 s
# scaled); held a minute here, so the run can show that a tile drops an ended cgroup's
# held figures (selectors.jobbed joins the live raw series).
SCALED = CONFIG.scaled(SCALE).replace(hold_s=60)
LIMIT = 192 * MiB
# "Two minutes before the kill", scaled, is 0.33 s: less than one scrape. The tiles are
# read two scrape intervals before the kill instead (12 unscaled minutes): a harder test.
BEFORE_S = max(120 / SCALE, 2.0)
SCRAPE_S = 1
RATE_INTERVAL = f"{4 * SCRAPE_S}s"  # Grafana's $__rate_interval: 4 x the scrape interval
TILES = ("Time to limit", "Headroom", "Unreclaimable / limit", "Top grower",
         "Hidden memory growth", "OOM kills in range")

# Two processes of a vLLM-like pod, named by their titles (the exporter reads argv[0]).
ENGINE = r"""
import mmap, sys, time
held = []
print("ready", flush=True)
sys.stdin.readline()  # go
while True:
    m = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for off in range(0, 1 << 20, 4096):
        m[off] = 1
    held.append(m)
    time.sleep(0.4)
"""
WORKER = r"""
import os, sys, time
cache, shm = sys.argv[1], sys.argv[2]
with open(cache, "wb") as f:
    for _ in range(32):
        f.write(b"\2" * (1 << 20))
    f.flush(); os.fsync(f.fileno())
for _ in range(2):  # twice: the second read makes the pages active
    with open(cache, "rb") as f:
        while f.read(1 << 20):
            pass
print("ready", flush=True)
sys.stdin.readline()  # go
while True:
    with open(shm, "ab") as f:  # appended and closed: shmem no process maps
        f.write(b"\1" * (1 << 19))
    time.sleep(0.5)
"""


def api(prom: str, path: str, **params: Any) -> Any:
    q = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{prom}/api/v1/{path}?{q}", timeout=30) as r:
        body: dict[str, Any] = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def bind(expr: str, values: dict[str, str]) -> str:
    """Grafana's variable interpolation for the variables named in ``values`` (others,
    e.g. label_replace's ``$1``, stay)."""
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return values.get(name, m.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's legend format: ``{{label}}`` replaced by the series' label value."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def colour(value: float, thresholds: dict[str, Any], maximum: float | None = None) -> str:
    """The colour Grafana gives ``value`` by a panel's thresholds (absolute, or percent of
    the field's maximum)."""
    if thresholds["mode"] == "percentage":
        assert maximum, "percentage thresholds need the field's maximum"
        value = value / maximum * 100
    out = thresholds["steps"][0]["color"]
    for step in thresholds["steps"][1:]:
        if value >= step["value"]:
            out = step["color"]
    return str(out)


class Proc:
    """A titled Python child placed in a cgroup before it allocates anything."""

    def __init__(self, title: str, script: str, cgroup_procs: Path, *args: str) -> None:
        def enter() -> None:
            cgroup_procs.write_text(str(os.getpid()))

        self.p = subprocess.Popen(
            [title, "-u", "-c", script, *args], executable=sys.executable,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=enter,
        )
        assert self.p.stdout is not None and self.p.stdout.readline().strip() == "ready"

    def go(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def stop(self) -> None:
        end(self.p)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    need_kernel_and("prometheus")
    procs: list[subprocess.Popen[bytes]] = []
    logs = tmp_path / "logs"
    logs.mkdir()
    with kube_tree() as tree:
        try:
            exporter_port, prom_port = free_port(), free_port()
            with (logs / "exporter.log").open("wb") as exporter_log:
                exporter = subprocess.Popen(
                    serve_on_tree(
                        tree, exporter_port, tmp_path / "oom",
                        # No PSS: read once a minute per process, it is a minute stale
                        # against the 10 s windows of this scaled run, and hidden memory
                        # (unreclaimable - what processes account for) would saw-tooth.
                        "--procfs.pss-max-rss=1", "--log.format=json"),
                    stderr=exporter_log,
                )
            procs.append(exporter)
            (tmp_path / "rules.yaml").write_text(rules_yaml(SCALED))
            config = prometheus_yml(f"127.0.0.1:{exporter_port}", interval_s=SCRAPE_S,
                                    rules=tmp_path / "rules.yaml")
            with (logs / "prometheus.log").open("wb") as prom_log:
                prom = start_prometheus(tmp_path, prom_port, config, stderr=prom_log)
            procs.append(prom)
            wait_http(f"http://127.0.0.1:{exporter_port}/healthz", exporter)
            wait_http(f"http://127.0.0.1:{prom_port}/-/ready", prom)
            yield {"tree": tree, "prom": f"http://127.0.0.1:{prom_port}",
                   "instance": f"127.0.0.1:{exporter_port}", "tmp": tmp_path}
        finally:
            stop_all(procs)


def first_screen(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in d["panels"] if p["type"] != "row"
            and p["gridPos"]["y"] + p["gridPos"]["h"] <= layout.FIRST_SCREEN_UNITS]


def on_screen(d: dict[str, Any]) -> list[dict[str, Any]]:
    """Panels at least partly on the first screen (what a picture of it shows)."""
    return [p for p in d["panels"] if p["type"] != "row"
            and p["gridPos"]["y"] < layout.FIRST_SCREEN_UNITS]


def read_tile(prom: str, panel: dict[str, Any], values: dict[str, str], at: float
              ) -> dict[str, Any]:
    """A stat tile as Grafana computes it: each target instant at ``at``; the value, the
    series' name (legend) and the colour by the panel's thresholds."""
    results = []
    for t in panel["targets"]:
        rows = api(prom, "query", query=bind(t["expr"], values), time=at)
        results.append([(legend(t["legendFormat"], r["metric"]),
                         float(r["value"][1])) for r in rows])
    defaults = panel["fieldConfig"]["defaults"]
    if not results[0]:
        return {"text": defaults.get("noValue", "no data"), "value": None, "colour": None}
    name, value = results[0][0]
    maximum = results[1][0][1] if len(results) > 1 and results[1] else None
    return {"name": name, "value": value, "maximum": maximum,
            "colour": colour(value, defaults["thresholds"], maximum)}


def dump_run(prom: str, models: dict[str, dict[str, Any]], values: dict[str, str],
             start: float, end: float, at: float, after: float, path: Path) -> None:
    """Every first-screen query of every dashboard over the run (range, 1 s step) and
    its tiles at ``at`` (before the kill) and ``after``, for the README's pictures."""
    out: dict[str, Any] = {"start": start, "end": end, "at": at, "after": after,
                           "killed": at + BEFORE_S,
                           "values": values, "dashboards": {}}
    for name, d in models.items():
        panels = []
        for p in on_screen(d):
            targets = []
            for t in p["targets"]:
                expr = bind(t["expr"], {**values, "__range": f"{int(at - start)}s"})
                item: dict[str, Any] = {"refId": t["refId"], "legend": t["legendFormat"]}
                if t.get("instant"):
                    item["at"] = api(prom, "query", query=expr, time=at)
                    after_expr = bind(t["expr"], {**values, "__range": f"{int(after - start)}s"})
                    item["after"] = api(prom, "query", query=after_expr, time=after)
                else:
                    item["range"] = api(prom, "query_range", query=expr, start=start,
                                        end=end, step=SCRAPE_S)
                targets.append(item)
            panels.append({"panel": p, "targets": targets})
        annotations = []
        for a in d["annotations"]["list"]:
            annotations.append({"name": a["name"], "colour": a["iconColor"],
                                "range": api(prom, "query_range",
                                             query=bind(a["target"]["expr"], values),
                                             start=start, end=end, step=SCRAPE_S)})
        rows = [{"title": p["title"], "y": p["gridPos"]["y"], "collapsed": p["collapsed"]}
                for p in d["panels"] if p["type"] == "row"]
        out["dashboards"][name] = {"model": {k: d[k] for k in ("title", "uid")},
                                   "panels": panels, "annotations": annotations,
                                   "rows": rows}
    path.write_text(json.dumps(out))


def test_pod_first_screen_shows_the_danger_before_the_kill(stack: dict[str, Any]) -> None:
    tree, prom = stack["tree"], stack["prom"]
    models = generate.dashboards(SCALED)
    pod_dash = models["headroom-pod"]
    tiles = {p["title"]: p for p in first_screen(pod_dash) if p["type"] == "stat"}
    assert tuple(tiles) == TILES

    uid, pod = tree.pod(limit=LIMIT)
    _, container = tree.container(pod)
    procs_file = tree.hierarchy.dir(container) / "cgroup.procs"
    shm = Path("/dev/shm") / f"headroom-dash-e2e-{uid[:8]}"
    tree.shm_files.append(shm)
    engine = Proc("VLLM::EngineCore", ENGINE, procs_file)
    worker = Proc("VLLM::Worker_TP0", WORKER, procs_file, str(stack["tmp"] / "cache"),
                  str(shm))
    start = time.time()
    try:
        deadline = time.monotonic() + 30
        while not api(prom, "query", query=f'headroom_processes{{pod="{uid}"}}'):
            assert time.monotonic() < deadline, "Prometheus never scraped the pod"
            time.sleep(0.5)
        time.sleep(15)  # a flat stretch: the windows (10 s trend) see a floor first
        engine.go()
        worker.go()
        rc = engine.p.wait(timeout=240)
        killed = time.time()
        time.sleep(6)  # the kill reaches the exporter, Prometheus and the rules
    finally:
        engine.stop()
        worker.stop()
    assert rc == -signal.SIGKILL, "the kernel's OOM killer ends EngineCore"
    end = time.time()

    values = {"job": "headroom", "namespace": "", "pod": uid, "container": ".+",
              "exporter": stack["instance"], "node": stack["instance"],
              "instance": ".+", "scope": selectors.VLLM_PROCESSES,
              "__rate_interval": RATE_INTERVAL, "datasource": "prometheus"}
    at, after = killed - BEFORE_S, end - 1
    before = {t: read_tile(prom, tiles[t], {**values, "__range": f"{int(at - start)}s"}, at)
              for t in TILES}
    kills = read_tile(prom, tiles["OOM kills in range"],
                      {**values, "__range": f"{int(after - start)}s"}, after)
    print(f"\nramp to the kill: {killed - start:.1f} s; tiles {BEFORE_S:.1f} s before it:")
    for t, v in before.items():
        print(f"  {t}: {v}")
    print(f"  after the kill, OOM kills in range: {kills}")
    grown = read_tile(prom, tiles["Top grower"], values, after)
    print(f"  after the kill, fastest-growing process: {grown}")
    dump = os.environ.get("HEADROOM_DASHBOARD_RUN")
    if dump:
        dump_run(prom, models, values, start, end, at, after, Path(dump))

    red_or_orange = {"red", "orange"}
    assert before["Time to limit"]["colour"] == "red", before["Time to limit"]
    assert before["Headroom"]["colour"] in red_or_orange, before["Headroom"]
    assert before["Headroom"]["maximum"] == LIMIT
    assert before["Unreclaimable / limit"]["colour"] in red_or_orange
    growing = before["Top grower"]
    assert growing["name"] == "EngineCore anon" and growing["colour"] == "orange", growing
    assert 1 * MiB < growing["value"] < 5 * MiB  # 2.5 MiB/s leaked
    hidden = before["Hidden memory growth"]
    assert hidden["colour"] == "orange" and 0.2 * MiB < hidden["value"] < 3 * MiB, hidden
    assert before["OOM kills in range"]["value"] in (None, 0.0)
    assert kills["value"] == 1.0 and kills["colour"] == "red", kills
    assert grown.get("name") != "EngineCore anon", "a killed process is no longer 'growing'"
    # The fleet's and the node's counts too (the pod has no process left after the
    # kill: the fleet's scope must still hold it).
    for dash in ("headroom-fleet", "headroom-node"):
        tile = next(p for p in models[dash]["panels"] if p["title"] == "OOM kills in range")
        count = read_tile(prom, tile, {**values, "__range": f"{int(after - start)}s"}, after)
        print(f"  after the kill, {dash} OOM kills in range: {count}")
        assert count["value"] == 1.0, (dash, count)
    # The pod-level counter itself reads 1 on v1 too: the exporter adds its containers'
    # kills, which the v1 kernel counts only in the victim's own cgroup.
    pod_level = api(prom, "query", time=after, query=(
        f'sum(increase(headroom_memory_events_total{{pod="{uid}", container="", '
        f'event="oom_kill"}}[{int(after - start)}s]))'))
    assert round(float(pod_level[0]["value"][1])) == 1

    # The container's cgroup goes (as at a restart): its raw series end, the rules still
    # hold its figures; the dashboard's figures (joined to the live raw series) drop it,
    # so no tile keeps showing an ended cgroup's headroom or countdown.
    tree.remove(container)
    time.sleep(5)
    gone = time.time()
    cid = {r["metric"]["container"] for r in api(prom, "query", time=killed,
           query=f'headroom_memory_limit_bytes{{pod="{uid}", container!=""}}')}
    held = api(prom, "query", time=gone, query=f'{HEADROOM}{{pod="{uid}"}}')
    shown = api(prom, "query", time=gone, query=bind(
        selectors.rule(HEADROOM, f'pod="{uid}"', scope=(f'pod="{uid}"',)), values))
    assert {r["metric"].get("container", "") for r in held} == {"", *cid}, held
    assert {r["metric"].get("container", "") for r in shown} == {""}, shown

