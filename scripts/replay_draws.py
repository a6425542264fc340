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
what failed; rerun one with ``--seed N --variant V CLASS``. The first line names the
checkout's commit and what it replays (``ledger.fingerprint``: the parsed rules with the
Alertmanager configuration, and the scenario code without docstrings);
``--summary LOG...`` merges the logs of several runs of a
sweep (the later result of a draw wins) into one pass count per class, with the number
of draws replayed at each rules and scenarios (``alerts/scenarios/ledger.py``):

    python3 scripts/replay_draws.py --first 12 -n 18 > seeds-12-29.log
    python3 scripts/replay_draws.py --summary seeds-0-11.log seeds-12-29.log

A run cut off part way is finished with ``--skip-logged``: the draws its log already
holds at the rules and scenarios of this checkout are not replayed again:

    python3 scripts/replay_draws.py --first 18 -n 6 --skip-logged seeds-18-23-part.log
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.scenarios import generator, ledger, sweep


def rules_commit() -> str:
    """The checkout's commit, ``+changes`` where the rules or the generator differ from
    it (a log read later must say which rules it replayed)."""
    here = Path(__file__).resolve().parents[1]
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(here), *a], capture_output=True,
                              text=True, check=False).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+changes" if git("status", "--porcelain", "alerts", "exporter") else "")


def read_logs(paths: list[str]) -> list[list[ledger.Result]]:
    """The draws of each sweep log, in order."""
    return [ledger.parse(Path(p).read_text(encoding="utf-8", errors="replace"))
            for p in paths]


def summarize(paths: list[str], classes: list[str], at: str | None = None) -> int:
    logs = read_logs(paths)
    if at is not None:
        # Only the draws replayed at that fingerprint (rules that were reverted leave
        # later results that no longer say what the rules in force do).
        logs = [[r for r in log if at in r.fingerprint] for log in logs]
    latest = ledger.merge(logs)
    print("\n".join(ledger.summary(latest, classes)))
    return 0 if all(r.passed for r in latest.values()) else 1


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
    ap.add_argument("--summary", nargs="+", metavar="LOG",
                    help="merge these runs' logs into a pass count per class; replay nothing")
    ap.add_argument("--at", metavar="DIGEST",
                    help="with --summary: only the draws whose fingerprint holds this "
                         "(e.g. 'rules 98b65e30ecc7', or the current one: 'now')")
    ap.add_argument("--skip-logged", nargs="+", metavar="LOG", default=[],
                    help="replay only the draws these logs do not hold at this checkout's "
                         "fingerprint (a sweep cut off part way, finished)")
    args = ap.parse_args()
    if args.summary:
        at = ledger.fingerprint() if args.at == "now" else args.at
        return summarize(args.summary, args.classes or list(generator.CLASSES), at)
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool is not installed", file=sys.stderr)
        return 2
    classes = args.classes or list(generator.CLASSES)
    seeds = [args.seed] if args.seed is not None else list(
        range(args.first, args.first + args.draws))
    rules, replayed = rules_commit(), ledger.fingerprint()
    logged = {(r.cls, r.seed) for log in read_logs(args.skip_logged) for r in log
              if r.fingerprint == replayed}
    jobs = [(c, s, args.variant if args.variant is not None else s % 3)
            for s in seeds for c in classes if (c, s) not in logged]
    print(ledger.header(rules, replayed), flush=True)
    results: list[ledger.Result] = []
    for o in sweep.replay_all(jobs, promtool, args.jobs, args.batch):
        assert not isinstance(o.job, str), "only drawn jobs were given"
        cls, seed, variant = o.job
        shown = generator.VARIANTS[variant]
        results.append(ledger.Result(cls, seed, shown, not o.problems, rules,
                                     "; ".join(o.problems), replayed))
        print(ledger.line(o.label, shown, o.seconds, o.problems), flush=True)
    print("\n" + "\n".join(ledger.summary(ledger.merge([results]), classes)))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
