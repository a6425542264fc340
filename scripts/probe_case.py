#!/usr/bin/env python3
"""Print what the shipped rules record for one replay case at chosen moments: the tool
for finding out why a case pages late, early or not at all.

    python3 scripts/probe_case.py gaps 'headroom:memory_time_to_limit:seconds' \\
        --before-kill 90m,60m,45m,30m
    python3 scripts/probe_case.py exporter-gaps:0:0 'ALERTS' --every 10m --last 3h

A case is a name from ``alerts.scenarios.cases.ALL`` (underscores or dashes) or a drawn
class ``CLASS:SEED:VARIANT`` (``alerts.scenarios.generator``). Each expression is evaluated
by promtool over the case's series with the shipped rules (variant 2: every range 1 ms
shorter) at each moment; times are printed relative to the end of the case (the kill).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts import yamlout
from alerts.generate import rules_yaml
from alerts.scenarios import cases, evaluate, generator
from alerts.scenarios.recording import Case

_TIME = re.compile(r'time:\s*(\S+)')


def load(name: str) -> tuple[Case, int]:
    if ":" in name:
        cls, seed, variant = name.split(":")
        return generator.draw(cls, int(seed), int(variant)).case, int(variant)
    for make in cases.ALL:
        if make.__name__ in (name, name.replace("-", "_")):
            return make(), 0
    raise SystemExit(f"no case named {name!r}")


def moments(case: Case, before: str | None, every: str | None, last: str | None
            ) -> list[int]:
    step = case.evaluation_s
    if before:
        out = [case.end_s - evaluate._seconds(x) for x in before.split(",")]
    else:
        span = evaluate._seconds(last or "3h")
        gap = evaluate._seconds(every or "10m")
        out = list(range(case.end_s - span, case.end_s + 1, gap))
    return [max(step, t - t % step) for t in out]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case")
    ap.add_argument("exprs", nargs="+")
    ap.add_argument("--before-kill", help="comma-separated durations before the end")
    ap.add_argument("--every", help="spacing of moments (default 10m)")
    ap.add_argument("--last", help="how far before the end to start (default 3h)")
    args = ap.parse_args()
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool is not installed", file=sys.stderr)
        return 2
    case, variant = load(args.case)
    times = moments(case, args.before_kill, args.every, args.last)
    with tempfile.TemporaryDirectory() as work:
        rules = Path(work) / "headroom.rules.yaml"
        text = rules_yaml()
        rules.write_text(evaluate.shortened(text) if variant == 2 else text)
        doc = evaluate.test_file(case, [rules], inhibit=True)
        doc["tests"][0]["promql_expr_test"] = [
            {"expr": e, "eval_time": f"{t}s", "exp_samples": []}
            for e in args.exprs for t in times]
        path = Path(work) / "probe.test.yaml"
        path.write_text(yamlout.dump(doc))
        proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                              text=True, timeout=3600, check=False)
    out = proc.stdout + proc.stderr
    got: dict[tuple[str, int], str] = {}
    for line in out.splitlines():
        s = line.strip().replace('\\"', '"')
        if s.startswith("expr:"):
            m = _TIME.search(s)
            when = evaluate._seconds(m.group(1)) if m else -1
            current = (s, when)
        elif s.startswith("got:"):
            got[(current[0], current[1])] = s[4:].strip()
    for e in args.exprs:
        print(f"== {e}")
        for t in times:
            hit = next((v for (k, w), v in got.items() if w == t and e in k), "(none)")
            print(f"  kill-{evaluate._hm(case.end_s - t):>7}  {hit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
