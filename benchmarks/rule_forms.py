"""Cheaper forms of the costliest rules, timed against the shipped ones in a real
Prometheus (a benchmark, not a test).

    python3 -m benchmarks.rule_forms [--containers 1000]

The node, the backfill and the Prometheus of `benchmarks.rule_cost`, plus one group
(`probe`, every 5 min) recording the growth each grower's horizon reads, once per kind
and per process. Once the lasting group and the probe have run, each form is queried
at the moment its inputs were recorded: the shipped expression and the cheaper one
must return the same series and values; the time is Prometheus' own (`stats=all`,
`evalTotalTime`), the least of five runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import yaml

from alerts.generate import rules_yaml
from exporter import promql as q
from tests.helpers.net import free_port, stop_all

from .rule_cost import Exporter, _get, _self_metric, _wait_ready, backfill, exposition, node

LASTING_BINDS = f'and on (namespace, pod) {q.TIME_TO_LIMIT}{{horizon="lasting"}}'
KIND_BINDING = f"({q.KIND_LASTING_GROWTH} {LASTING_BINDS} or {q.KIND_GROWTH})"
KIND_BINDING_PROCESS = (f'({q.KIND_LASTING_GROWTH}{{kind=~"anon|shmem"}} {LASTING_BINDS} '
                        f'or {q.KIND_GROWTH}{{kind=~"anon|shmem"}})')
PROCESS_BINDING = f"({q.PROCESS_LASTING_GROWTH} {LASTING_BINDS} or {q.PROCESS_GROWTH})"
PROBE_KIND = "probe:memory_kind_binding_growth:rate"
PROBE_PROCESS = "probe:process_memory_binding_growth:rate"
PROBE_RULES = {"groups": [{"name": "probe", "interval": "5m", "rules": [
    {"record": PROBE_KIND, "expr": KIND_BINDING},
    {"record": PROBE_PROCESS, "expr": PROCESS_BINDING}]}]}


def shipped(name: str) -> str:
    for group in yaml.safe_load(rules_yaml())["groups"]:
        for rule in group["rules"]:
            if rule.get("record") == name:
                return str(rule["expr"])
    raise KeyError(name)


def forms() -> list[tuple[str, str, str, str]]:
    """(name, group whose moment it is queried at, shipped, cheaper)."""
    top = shipped(q.TOP_GROWER)
    cheap_top = (top.replace(KIND_BINDING_PROCESS, f'{PROBE_KIND}{{kind=~"anon|shmem"}}')
                 .replace(KIND_BINDING, PROBE_KIND).replace(PROCESS_BINDING, PROBE_PROCESS))
    assert "lasting_growth" not in cheap_top, cheap_top
    floor = shipped(q.UNRECLAIMABLE_BASELINE_RISE)
    envelope = shipped(q.PEAK_ENVELOPE_RISE)
    return [
        # The floor and the envelope now are recorded just before, in the same round.
        ("baseline_rise", "headroom.lasting", floor, floor.replace(
            f"min_over_time({q.HOURLY_MIN}[1d])\n", f"{q.UNRECLAIMABLE_BASELINE}\n", 1)),
        ("peak_envelope_rise", "headroom.lasting", envelope, envelope.replace(
            f"max_over_time({q.HOURLY_MAX}[1d] offset 1h)\n", f"{q.PEAK_ENVELOPE}\n", 1)),
        # Each grower's growth computed once per round (two recorded series), not ten times.
        ("top_grower", "probe", top, cheap_top),
        ("top_grower: the two recordings it reads", "probe",
         f"{KIND_BINDING} or {PROCESS_BINDING}", f"{KIND_BINDING} or {PROCESS_BINDING}"),
    ]


def _query(prom: str, expr: str, at: float) -> tuple[float, list[tuple[str, str]]]:
    args = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}", "stats": "all"})
    body = json.loads(_get(f"{prom}/api/v1/query?{args}"))["data"]
    rows = sorted((json.dumps(r["metric"], sort_keys=True), r["value"][1])
                  for r in body["result"])
    return float(body["stats"]["timings"]["evalTotalTime"]), rows


def compare(prom: str, at: dict[str, float]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for name, group, old, new in forms():
        t = at[group]
        old_s, old_rows = min(_query(prom, old, t) for _ in range(5))
        new_s, new_rows = min(_query(prom, new, t) for _ in range(5))
        out.append({"form": name, "shipped_s": round(old_s, 3), "cheaper_s": round(new_s, 3),
                    "series": len(old_rows), "identical": old_rows == new_rows})
    return out


def run(containers: int) -> list[dict[str, object]]:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert prometheus and promtool, "needs the prometheus package"
    cgroups = node(containers)
    exporter = Exporter(exposition(cgroups))
    instance = f"127.0.0.1:{exporter.port}"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        backfill(cgroups, instance, data, work, promtool)
        (work / "headroom.rules.yaml").write_text(rules_yaml())
        (work / "probe.rules.yaml").write_text(yaml.safe_dump(PROBE_RULES))
        port = free_port()
        (work / "prometheus.yml").write_text(
            "global: {scrape_interval: 15s, evaluation_interval: 1m}\n"
            "rule_files: [headroom.rules.yaml, probe.rules.yaml]\n"
            "scrape_configs:\n- job_name: headroom\n"
            f"  static_configs: [{{targets: ['{instance}']}}]\n")
        proc = subprocess.Popen(
            [prometheus, f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=30d", "--storage.tsdb.max-block-duration=6h"],
            stdout=subprocess.DEVNULL, stderr=(work / "prom.log").open("w"))
        prom = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(prom, 600)
            deadline = time.monotonic() + 900
            at: dict[str, float] = {}
            while time.monotonic() < deadline:
                time.sleep(10)
                at = _self_metric(prom, "prometheus_rule_group_last_evaluation_timestamp_seconds")
                # The probe reads the lasting group's figures: it must run after one.
                if 0 < at.get("headroom.lasting", 0) < at.get("probe", 0):
                    break
            return compare(prom, at)
        finally:
            stop_all([proc])
            exporter.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=1000)
    args = ap.parse_args()
    for row in run(args.containers):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
