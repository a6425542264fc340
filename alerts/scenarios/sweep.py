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
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from alerts.generate import rules_yaml

from . import batch, cases, converted, evaluate, generator
from .draws import Draw
from .evaluate import Stat
from .recording import Case, Key

Job = tuple[str, int, int]  # class, seed, variant
T = TypeVar("T")
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


def runs(items: Sequence[T], key: Callable[[T], Hashable], steps: Callable[[T], float],
         size: int) -> list[list[T]]:
    """Items that can share a promtool run (one ``key``: an evaluation interval and a
    rule file), the longest first, each run ``size`` items at most, none shorter than
    ``SPAN_SHARE`` of its run's longest (in evaluation ``steps``); the costliest runs
    first."""
    groups: dict[Hashable, list[T]] = {}
    for item in sorted(items, key=steps, reverse=True):
        groups.setdefault(key(item), []).append(item)
    out: list[list[T]] = []
    for group in groups.values():
        while group:
            longest = steps(group[0])
            run = [i for i in group if steps(i) >= SPAN_SHARE * longest][:size]
            out.append(run)
            group = [i for i in group if i not in run]
    return sorted(out, key=lambda run: run_cost([steps(i) for i in run]), reverse=True)


def batches(made: Sequence[Made], size: int) -> list[list[Made]]:
    """Draws in runs (``runs``): one evaluation interval and rule file to a run."""
    return runs(made, lambda m: (m.job[2] == SHORTENED, m.evaluation_s),
                lambda m: m.steps, size)


def run_cost(steps: Sequence[float]) -> float:
    """A run's cost in evaluation steps of one draw (the unit of a single replay), from
    the evaluation steps of each draw in it."""
    return max(steps) * (1 + ADDED_COST * (len(steps) - 1))


def run_batch(made: Sequence[Made], workdir: str, promtool: str) -> list[Outcome]:
    """Replay one batch (``batches``) and judge each draw of it."""
    start = time.monotonic()
    draws: list[Draw] = [pickle.loads(Path(m.path).read_bytes()) for m in made]
    stats = _replay_run([d.case for d in draws], workdir, promtool,
                        shortened=made[0].job[2] == SHORTENED)
    took = (time.monotonic() - start) / len(draws)
    return [Outcome(m.job, d.label, generator.verdict(d, st), took)
            for m, d, st in zip(made, draws, stats, strict=True)]


def _replay_run(run: Sequence[Case], workdir: str, promtool: str, shortened: bool = False
                ) -> list[dict[Key, Stat]]:
    """The stats of each case of one run, in order: alone or batched, on the shipped
    rules (every range 1 ms shorter where ``shortened``)."""
    work = Path(tempfile.mkdtemp(dir=workdir))
    rules = work / "headroom.rules.yaml"
    text = rules_yaml()
    rules.write_text(evaluate.shortened(text) if shortened else text)
    if len(run) == 1:
        stats = [evaluate.replay(run[0], [rules], work, promtool)]
    else:
        stats = batch.replay(run, [rules], work, promtool)
    shutil.rmtree(work, ignore_errors=True)
    return stats


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


# --- the described cases ----------------------------------------------------------------------
def described(name: str) -> Case:
    """A described case by name: ``cases.ALL`` and the first wave's."""
    for make_case in cases.ALL:
        if make_case.__name__ == name:
            return make_case()
    return next(c for c in converted.first_wave() if c.name == name)


def _replay_described(names: Sequence[str], workdir: str, promtool: str
                      ) -> dict[str, dict[Key, Stat]]:
    stats = _replay_run([described(n) for n in names], workdir, promtool)
    return dict(zip(names, stats, strict=True))


def replay_described(names: Sequence[str], promtool: str, workers: int = 2, size: int = 10
                     ) -> dict[str, dict[Key, Stat]]:
    """The stats of each described case (by ``described`` name), in runs as the draws'."""
    with tempfile.TemporaryDirectory() as workdir, \
            ProcessPoolExecutor(max_workers=workers) as pool:
        sized = list(zip(names, pool.map(_steps_of, names), strict=True))
        futures = [pool.submit(_replay_described, [n for n, _ in run], workdir, promtool)
                   for run in runs(sized, lambda x: x[1][0], lambda x: x[1][1], size)]
        out: dict[str, dict[Key, Stat]] = {}
        for future in as_completed(futures):
            out.update(future.result())
        return out


def _steps_of(name: str) -> tuple[int, float]:
    case = described(name)
    return case.evaluation_s, case.end_s / case.evaluation_s


__all__ = ["Job", "Made", "Outcome", "batches", "described", "make", "replay_all",
           "replay_described", "run_batch", "run_cost", "runs"]
