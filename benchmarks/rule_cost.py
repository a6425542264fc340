"""Cost of the shipped rules in a real Prometheus (a benchmark, not a test).

    python3 -m benchmarks.rule_cost [--containers 1000 10000] [--lasting-rounds 2]

For each size: a synthetic exporter (one HTTP server holding a node-shaped exposition:
N containers, each with its pod-level cgroup, 3 processes, memory kinds, /dev/shm and
vLLM series; one container in ten leaks 3 % of its limit a day) is scraped every 15 s
by a real Prometheus (the Debian package) evaluating the shipped rules
(`alerts/headroom.rules.yaml`) at the default 1 m evaluation interval.

The history each rule reads is backfilled first with `promtool tsdb create-blocks-from
openmetrics`, and only that (`HISTORY`): the 1-minute recorded figures over the
windows read (the last hour, 6 h of /dev/shm for its forecast), the lasting group's
5-minute figures: the breakdown per kind and per process over the last hour and the
same hour a day ago (the day-over-day growth), the floors, envelope and pattern over
the day and two hours they read, their own figures a day ago (what the rises read), a
day of what grew, and the raw `memory.events` counters over the hour and ten minutes
the OOM alert reads. The other raw series are read over at most 15
minutes: the scrapes fill those windows before the lasting group's second round is
measured. The backfill is one OpenMetrics file per 6-hour block (promtool reads its
whole input once per block it writes), converted two at a time; Prometheus runs with
6-hour blocks at most, so no compaction runs while the rules are measured.

Then it waits until the lasting group has evaluated ``--lasting-rounds`` times and
the 1-minute groups at least three times (the hourly group is not waited for) and
prints, per group,
`prometheus_rule_group_last_duration_seconds` (the wall time of its last round, and
of every round seen), each group's round with every rule queried alone (the groups
run at once on the same cores, so each wall time also holds the others' share), the
samples it wrote in that round, the number of series the
rules record, the costliest rules (`evaluationTime` of /api/v1/rules), the load
average while it measured, and the time each phase took.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.parse

import yaml

from alerts.generate import rules_yaml
from exporter.promql import CONFIG

from .rule_node import fetch, prometheus_over_history, self_metric


def _count(prom: str, expr: str) -> int:
    url = f"{prom}/api/v1/query?{urllib.parse.urlencode({'query': f'count({expr})'})}"
    result = json.loads(fetch(url))["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def costliest(prom: str, n: int = 10) -> list[dict[str, object]]:
    """The rules whose last evaluation took longest (/api/v1/rules `evaluationTime`)."""
    groups = json.loads(fetch(f"{prom}/api/v1/rules"))["data"]["groups"]
    rules = [
        {"group": g["name"], "rule": r["name"], "labels": r.get("labels", {}),
         "s": round(r["evaluationTime"], 3)}
        for g in groups for r in g["rules"]]
    return sorted(rules, key=lambda r: -float(str(r["s"])))[:n]


# Minutes between rounds of the groups not evaluated every minute.
ROUND_MINUTES = {"headroom.lasting": CONFIG.lasting_interval_s / 60,
                 "headroom.floor_memory": CONFIG.floor_memory_interval_s / 60}


def isolated_rules(prom: str, runs: int = 2) -> list[tuple[str, str, float]]:
    """Each rule's expression queried alone at the moment (Prometheus' own
    ``evalTotalTime``, the least of ``runs``): (group, rule, seconds) per rule."""
    out: list[tuple[str, str, float]] = []
    for group in yaml.safe_load(rules_yaml())["groups"]:
        for rule in group["rules"]:
            args = urllib.parse.urlencode({"query": rule["expr"], "stats": "all"})
            took = min(
                float(json.loads(fetch(f"{prom}/api/v1/query?{args}"))["data"]["stats"]
                      ["timings"]["evalTotalTime"]) for _ in range(runs))
            out.append((group["name"], rule.get("record") or rule["alert"], took))
    return out


def isolated(per_rule: list[tuple[str, str, float]]) -> dict[str, float]:
    """The rules queried alone, summed per group: the cost of a round without the other
    groups, which Prometheus evaluates at the same time on the same cores (so each
    group's wall time above also holds the others' share)."""
    out: dict[str, float] = {}
    for group, _, took in per_rule:
        out[group] = out.get(group, 0.0) + took
    return {g: round(s, 2) for g, s in out.items()}


def costliest_alone(per_rule: list[tuple[str, str, float]], n: int = 15) -> list[str]:
    """The rules costliest queried alone, weighted per minute (a 5-minute group's rule
    counts a fifth), as "group rule seconds-a-round (seconds-a-minute)"."""
    ranked = sorted(per_rule, key=lambda r: -r[2] / ROUND_MINUTES.get(r[0], 1))
    return [f"{g} {name} {s:.3f} ({s / ROUND_MINUTES.get(g, 1):.3f}/min)"
            for g, name, s in ranked[:n]]


def _watch(prom: str, lasting_rounds: int, wait_s: int) -> dict[str, object]:
    """Polls until the lasting group has finished `lasting_rounds` rounds and every
    1-minute group three (the hourly group may run once in the wait, or not); keeps
    each round's duration and the load average meanwhile. A round is counted when it
    ends (Prometheus sets a group's last evaluation time then; its iteration counter
    moves when a round starts)."""
    deadline = time.monotonic() + wait_s
    ended: dict[str, float] = {}
    rounds: dict[str, list[float]] = {}
    load: list[float] = []
    while time.monotonic() < deadline:
        time.sleep(10)
        load.append(os.getloadavg()[0])
        at = self_metric(prom, "prometheus_rule_group_last_evaluation_timestamp_seconds")
        durations = self_metric(prom, "prometheus_rule_group_last_duration_seconds")
        for group, t in at.items():
            if t > max(ended.get(group, 0), 0):
                ended[group] = t
                rounds.setdefault(group, []).append(round(durations.get(group, 0), 3))
        lasting = len(rounds.get("headroom.lasting", []))
        # The hourly group may run once in the wait or not at all: not waited for.
        others = [len(r) for g, r in rounds.items() if g not in ROUND_MINUTES]
        if lasting >= lasting_rounds and len(others) >= 3 and min(others) >= 3:
            break
    return {"round_durations_s": rounds,
            "load_average_1m": {"min": min(load, default=0), "max": max(load, default=0),
                                "mean": round(sum(load) / max(len(load), 1), 1)}}


def measure(containers: int, lasting_rounds: int, wait_s: int) -> dict[str, object]:
    with prometheus_over_history(containers, {"headroom.rules.yaml": rules_yaml()}) as run:
        prom = run.prom
        watched = _watch(prom, lasting_rounds, wait_s)
        measured = time.monotonic()
        groups = self_metric(prom, "prometheus_rule_group_last_duration_seconds")
        written = self_metric(prom, "prometheus_rule_group_last_evaluation_samples")
        top = costliest(prom)
        per_rule = isolated_rules(prom)
        alone = isolated(per_rule)
        recorded = _count(prom, '{__name__=~"headroom:.+"}')
        series = _count(prom, '{__name__=~".+"}')
    return {
        "containers": containers, "cgroups": run.cgroups,
        "backfilled_samples": run.samples,
        "phases_s": {"write_text": round(run.text_s), "promtool": round(run.blocks_s),
                     "prometheus_ready": round(run.ready - run.started),
                     "rounds": round(measured - run.ready)},
        **watched,
        "group_last_duration_s": groups,
        "group_last_samples": written,
        "rule_set_duration_s": round(sum(groups.values()), 3),
        "costliest_rules": top,
        "isolated_round_s": alone,
        "costliest_alone": costliest_alone(per_rule),
        # Per minute: the 1-minute groups' rounds plus the slower groups' shares.
        "isolated_per_minute_s": round(sum(
            s / ROUND_MINUTES.get(g, 1) for g, s in alone.items()), 2),
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
