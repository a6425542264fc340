#!/usr/bin/env python3
"""Replay seeded draws of every scenario class (alerts/scenarios/generator.py) through the
shipped rules with promtool and print a pass count per class.

    python3 scripts/replay_draws.py                    # 30 draws of every class
    python3 scripts/replay_draws.py -n 5 -j 2 sawtooth ramp

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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.generate import rules_yaml
from alerts.scenarios import evaluate, generator


def one(cls: str, seed: int, variant: int, workdir: str, promtool: str
        ) -> tuple[str, int, int, str, list[str], float]:
    start = time.monotonic()
    d = generator.draw(cls, seed, variant)
    work = Path(tempfile.mkdtemp(dir=workdir))
    rules = work / "headroom.rules.yaml"
    text = rules_yaml()
    rules.write_text(evaluate.shortened(text) if variant == 2 else text)
    problems = generator.verdict(d, evaluate.replay(d.case, [rules], work, promtool))
    shutil.rmtree(work, ignore_errors=True)
    return cls, seed, variant, d.label, problems, time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("classes", nargs="*", help="classes (default: all)")
    ap.add_argument("-n", "--draws", type=int, default=30)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, help="one seed only")
    ap.add_argument("--variant", type=int, choices=(0, 1, 2))
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
        futures = [pool.submit(one, c, s, v, workdir, promtool) for c, s, v in jobs]
        for f in futures:
            cls, _, variant, label, problems, took = f.result()
            total[cls] += 1
            if problems:
                print(f"FAIL {label} variant={generator.VARIANTS[variant]} "
                      f"({took:.0f}s): {'; '.join(problems)}", flush=True)
            else:
                passed[cls] += 1
                print(f"ok   {label} variant={generator.VARIANTS[variant]} ({took:.0f}s)",
                      flush=True)
    print("\nclass                    passed")
    for cls in classes:
        print(f"{cls:<24} {passed[cls]}/{total[cls]}")
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
