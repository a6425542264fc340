#!/usr/bin/env python3
"""Replay seeded draws of every scenario class (alerts/scenarios/generator.py) through the
shipped rules with promtool and print a pass count per class.

    python3 scripts/replay_draws.py                    # 30 draws of every class
    python3 scripts/replay_draws.py -n 5 -j 2 sawtooth ramp
    python3 scripts/replay_draws.py --batch 1          # one promtool run per draw

Draws that share a scrape interval, an evaluation interval and a variant are replayed
together, up to ``--batch`` in one promtool run (alerts/scenarios/batch.py: each draw's pods
and instances apart; about four times cheaper per draw); ``--batch 1`` runs them alone.
Draw i of a class uses seed i and variant i % 3 (as shipped; samples half way between
evaluations; every range 1 ms shorter). A failing draw prints its seed, parameters and
what failed; rerun one with ``--seed N --variant V CLASS``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.generate import rules_yaml
from alerts.scenarios import batch, evaluate, generator

Job = tuple[str, int, int]  # class, seed, variant
Outcome = tuple[str, int, str, list[str], float]  # class, variant, label, problems, seconds


def run_batch(jobs: list[Job], workdir: str, promtool: str) -> list[Outcome]:
    start = time.monotonic()
    draws = [generator.draw(c, s, v) for c, s, v in jobs]
    variant = jobs[0][2]
    work = Path(tempfile.mkdtemp(dir=workdir))
    rules = work / "headroom.rules.yaml"
    text = rules_yaml()
    rules.write_text(evaluate.shortened(text) if variant == 2 else text)
    if len(draws) == 1:
        stats = [evaluate.replay(draws[0].case, [rules], work, promtool)]
    else:
        stats = batch.replay([d.case for d in draws], [rules], work, promtool,
                             phased=variant == 1)
    shutil.rmtree(work, ignore_errors=True)
    took = (time.monotonic() - start) / len(draws)
    return [(d.cls, variant, d.label, generator.verdict(d, st), took)
            for d, st in zip(draws, stats, strict=True)]


def batches(jobs: list[Job], size: int) -> list[list[Job]]:
    """Jobs that can share a promtool run (one scrape and evaluation interval and one
    variant), ``size`` at most per run, the longest groups first."""
    groups: dict[tuple[int, int, int], list[Job]] = {}
    for job in jobs:
        case = generator.draw(*job).case
        groups.setdefault((job[2], case.step_s, case.evaluation_s), []).append(job)
    out = [g[i:i + size] for g in groups.values() for i in range(0, len(g), size)]
    return sorted(out, key=len, reverse=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("classes", nargs="*", help="classes (default: all)")
    ap.add_argument("-n", "--draws", type=int, default=30)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, help="one seed only")
    ap.add_argument("--variant", type=int, choices=(0, 1, 2))
    ap.add_argument("--batch", type=int, default=10, help="draws per promtool run")
    args = ap.parse_args()
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool is not installed", file=sys.stderr)
        return 2
    classes = args.classes or list(generator.CLASSES)
    seeds = [args.seed] if args.seed is not None else list(range(args.draws))
    jobs = [(c, s, args.variant if args.variant is not None else s % 3)
            for s in seeds for c in classes]
    passed: dict[str, int] = dict.fromkeys(classes, 0)
    total: dict[str, int] = dict.fromkeys(classes, 0)
    with tempfile.TemporaryDirectory() as workdir, \
            ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_batch, b, workdir, promtool)
                   for b in batches(jobs, max(1, args.batch))]
        for cls, variant, label, problems, took in (
                o for f in as_completed(futures) for o in f.result()):
            total[cls] += 1
            if problems:
                print(f"FAIL {label} variant={generator.VARIANTS[variant]} "
                      f"({took:.0f}s/draw): {'; '.join(problems)}", flush=True)
            else:
                passed[cls] += 1
                print(f"ok   {label} variant={generator.VARIANTS[variant]} ({took:.0f}s/draw)",
                      flush=True)
    print("\nclass                    passed")
    for cls in classes:
        print(f"{cls:<24} {passed[cls]}/{total[cls]}")
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
