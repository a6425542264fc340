#!/usr/bin/env python3
"""Replay seeded draws of every scenario class (alerts/scenarios/generator.py) through the
shipped rules with promtool and print a pass count per class.

    python3 scripts/replay_draws.py                    # 30 draws of every class
    python3 scripts/replay_draws.py -n 5 -j 2 sawtooth ramp
    python3 scripts/replay_draws.py --first 4 -n 4    # seeds 4-7 of every class
    python3 scripts/replay_draws.py --batch 1          # one promtool run per draw

Draws that share an evaluation interval and a rule file, and are of like length, are
replayed together, up to ``--batch`` in one promtool run (alerts/scenarios/sweep.py, as
the replay tier runs them: each draw's pods and instances apart); ``--batch 1`` runs
them alone.
Draw i of a class uses seed i and variant i % 3 (as shipped; samples half way between
evaluations; every range 1 ms shorter). A failing draw prints its seed, parameters and
what failed; rerun one with ``--seed N --variant V CLASS``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.scenarios import generator, sweep


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("classes", nargs="*", help="classes (default: all)")
    ap.add_argument("-n", "--draws", type=int, default=30)
    ap.add_argument("--first", type=int, default=0,
                    help="the first seed (a sweep continued: --first 4 -n 4 runs seeds 4-7)")
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
    seeds = [args.seed] if args.seed is not None else list(
        range(args.first, args.first + args.draws))
    jobs = [(c, s, args.variant if args.variant is not None else s % 3)
            for s in seeds for c in classes]
    passed: dict[str, int] = dict.fromkeys(classes, 0)
    total: dict[str, int] = dict.fromkeys(classes, 0)
    for o in sweep.replay_all(jobs, promtool, args.jobs, args.batch):
        assert not isinstance(o.job, str), "only drawn jobs were given"
        cls, _, variant = o.job
        total[cls] += 1
        shown = f"{o.label} variant={generator.VARIANTS[variant]} ({o.seconds:.0f}s/draw)"
        if o.problems:
            print(f"FAIL {shown}: {'; '.join(o.problems)}", flush=True)
        else:
            passed[cls] += 1
            print(f"ok   {shown}", flush=True)
    print("\nclass                    passed")
    for cls in classes:
        print(f"{cls:<24} {passed[cls]}/{total[cls]}")
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
