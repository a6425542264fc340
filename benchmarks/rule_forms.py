"""Cheaper forms of the costliest rules, timed against the shipped ones in a real
Prometheus (a benchmark, not a test).

    python3 -m benchmarks.rule_forms [--containers 1000]

The node, the backfill and the Prometheus of `benchmarks.rule_node`, plus one group
(`probe`, every 5 min) recording the growth each grower's horizon reads, once per kind
and per process. Once the lasting group and the probe have run, each form is queried
at the moment its inputs were recorded: the shipped expression and the cheaper one
must return the same series and values; the time is Prometheus' own (`stats=all`,
`evalTotalTime`), the least of five runs.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.parse

import yaml

from alerts.generate import rules_yaml
from exporter import promql as q

from .rule_node import fetch, prometheus_over_history, self_metric

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
    body = json.loads(fetch(f"{prom}/api/v1/query?{args}"))["data"]
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
    rules = {"headroom.rules.yaml": rules_yaml(), "probe.rules.yaml": yaml.safe_dump(PROBE_RULES)}
    with prometheus_over_history(containers, rules) as backfilled:
        deadline = time.monotonic() + 900
        at: dict[str, float] = {}
        while time.monotonic() < deadline:
            time.sleep(10)
            at = self_metric(backfilled.prom,
                             "prometheus_rule_group_last_evaluation_timestamp_seconds")
            # The probe reads the lasting group's figures: it must run after one.
            if 0 < at.get("headroom.lasting", 0) < at.get("probe", 0):
                break
        return compare(backfilled.prom, at)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=1000)
    args = ap.parse_args()
    for row in run(args.containers):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
