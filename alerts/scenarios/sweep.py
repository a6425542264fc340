"""Replay many draws through the shipped rules, batched and in parallel: the replay tier
(tests/unit/test_generated.py) and ``scripts/replay_draws.py`` both run their draws here.

Each draw is made once, in the pool, and kept on disk (its series are far too big to
send between processes); what it shares a run by is known only then. Draws that share
an evaluation interval and a rule file (the shortened ranges of variant 2 are a rule
file of their own) share a promtool run (``batch.replay``: each draw's pods and
instances apart), up to ``size`` per run. A run lasts as long as its longest draw and
each draw in it adds about a quarter of a single replay that long (``batch``), so a
run takes only draws at least ``SPAN_SHARE`` as long as its longest: at stop 44, ten
draws of 10-227 h to a run made the replay tier slower than one run per draw. The
costliest runs start first, so that two workers end together.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from alerts.generate import rules_yaml

from . import batch, evaluate, generator
from .draws import Draw

Job = tuple[str, int, int]  # class, seed, variant
SHORTENED = 2  # the variant whose rules have every range 1 ms shorter
# A draw joins a run whose longest draw is at most this many times its own length: below
# about a quarter it costs the run more than it saves alone (measured, ``batch``).
SPAN_SHARE = 0.4
ADDED_COST = 0.27  # of a single replay as long as the run, per draw added to it


@dataclass(frozen=True)
class Outcome:
    job: Job
    label: str  # the draw's class, seed and parameters
    problems: list[str]  # what the verdict found wrong (empty: it holds)
    seconds: float  # the promtool run's time, per draw in it


@dataclass(frozen=True)
class Made:
    """A draw made and kept on disk, with what it shares a run by."""
    job: Job
    path: str
    evaluation_s: int
    end_s: int

    @property
    def steps(self) -> float:
        return self.end_s / self.evaluation_s


def make(job: Job, workdir: str) -> Made:
    d = generator.draw(*job)
    path = Path(workdir) / f"{job[0]}.{job[1]}.{job[2]}.draw"
    path.write_bytes(pickle.dumps(d, protocol=pickle.HIGHEST_PROTOCOL))
    return Made(job, str(path), d.case.evaluation_s, d.case.end_s)


def batches(made: Sequence[Made], size: int) -> list[list[Made]]:
    """Draws that can share a promtool run (one evaluation interval, one rule file), the
    longest first, each run ``size`` draws at most, none shorter than ``SPAN_SHARE`` of
    its run's longest; the costliest runs first."""
    groups: dict[tuple[bool, int], list[Made]] = {}
    for m in sorted(made, key=lambda m: -m.end_s):
        groups.setdefault((m.job[2] == SHORTENED, m.evaluation_s), []).append(m)
    out: list[list[Made]] = []
    for group in groups.values():
        while group:
            longest = group[0].end_s
            run = [m for m in group if m.end_s >= SPAN_SHARE * longest][:size]
            out.append(run)
            group = [m for m in group if m not in run]
    return sorted(out, key=cost, reverse=True)


def cost(run: Sequence[Made]) -> float:
    """A run's cost in evaluation steps of one draw (the unit of a single replay)."""
    return max(m.steps for m in run) * (1 + ADDED_COST * (len(run) - 1))


def run_batch(made: Sequence[Made], workdir: str, promtool: str) -> list[Outcome]:
    """Replay one batch (``batches``) and judge each draw of it."""
    start = time.monotonic()
    draws: list[Draw] = [pickle.loads(Path(m.path).read_bytes()) for m in made]
    work = Path(tempfile.mkdtemp(dir=workdir))
    rules = work / "headroom.rules.yaml"
    text = rules_yaml()
    rules.write_text(evaluate.shortened(text) if made[0].job[2] == SHORTENED else text)
    if len(draws) == 1:
        stats = [evaluate.replay(draws[0].case, [rules], work, promtool)]
    else:
        stats = batch.replay([d.case for d in draws], [rules], work, promtool)
    shutil.rmtree(work, ignore_errors=True)
    took = (time.monotonic() - start) / len(draws)
    return [Outcome(m.job, d.label, generator.verdict(d, st), took)
            for m, d, st in zip(made, draws, stats, strict=True)]


def replay_all(jobs: Sequence[Job], promtool: str, workers: int = 2, size: int = 10
               ) -> Iterator[Outcome]:
    """Every job's outcome, as its batch ends."""
    with tempfile.TemporaryDirectory() as workdir, \
            ProcessPoolExecutor(max_workers=workers) as pool:
        made = list(pool.map(make, jobs, [workdir] * len(jobs)))
        futures = [pool.submit(run_batch, b, workdir, promtool)
                   for b in batches(made, max(1, size))]
        for future in as_completed(futures):
            yield from future.result()


__all__ = ["Job", "Made", "Outcome", "batches", "cost", "make", "replay_all", "run_batch"]
