"""Replay many draws through the shipped rules, batched and in parallel: the replay tier
(the drawn scenarios of tests/unit/test_generated.py and the described cases of
tests/unit/test_scenarios.py, in one pool) and ``scripts/replay_draws.py`` both run their
draws here.

Each draw (or described case) is made once, in the pool, and kept on disk (its series
are far too big to send between processes); what it shares a run by is known only then.
Draws that share an evaluation interval and a rule file (the shortened ranges of
variant 2 are a rule file of their own) share a promtool run (``batch.replay``: each
draw's pods and instances apart), up to ``size`` per run. A run lasts as long as its
longest draw and each draw in it adds about a quarter of a single replay that long
(``batch``), so a run takes only draws at least ``SPAN_SHARE`` as long as its longest:
at stop 44, ten draws of 10-227 h to a run made the replay tier slower than one run per
draw. The costliest runs start first, so that two workers end together.
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

from . import batch, cases, converted, evaluate, generator
from .draws import Draw
from .evaluate import Stat
from .recording import Case, Key

Job = tuple[str, int, int]  # class, seed, variant
Item = Job | str  # a drawn job, or a described case by name (``described``)
SHORTENED = 2  # the variant whose rules have every range 1 ms shorter
# A draw joins a run whose longest draw is at most this many times its own length: below
# about a quarter it costs the run more than it saves alone (measured, ``batch``).
SPAN_SHARE = 0.4
ADDED_COST = 0.27  # of a single replay as long as the run, per draw added to it


@dataclass(frozen=True)
class Outcome:
    job: Item
    label: str  # the draw's class, seed and parameters (a described case's name)
    problems: list[str]  # what the verdict found wrong (empty: it holds)
    seconds: float  # the promtool run's time, per draw in it


@dataclass(frozen=True)
class Made:
    """A draw (or described case) made and kept on disk, with what it shares a run by."""
    job: Item
    path: str
    evaluation_s: int
    end_s: int

    @property
    def steps(self) -> float:
        return self.end_s / self.evaluation_s

    @property
    def shortened(self) -> bool:
        """Replayed on the rules with every range 1 ms shorter."""
        return not isinstance(self.job, str) and self.job[2] == SHORTENED


def make(job: Item, workdir: str) -> Made:
    kept: Draw | Case
    if isinstance(job, str):
        kept, name = described(job), f"described.{job}"
        case = kept
    else:
        kept, name = generator.draw(*job), f"{job[0]}.{job[1]}.{job[2]}"
        case = kept.case
    path = Path(workdir) / f"{name}.draw"
    path.write_bytes(pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL))
    return Made(job, str(path), case.evaluation_s, case.end_s)


def batches(made: Sequence[Made], size: int) -> list[list[Made]]:
    """Draws that can share a promtool run (one evaluation interval and rule file), the
    longest first, each run ``size`` draws at most, none shorter than ``SPAN_SHARE`` of
    its run's longest (in evaluation steps); the costliest runs first."""
    groups: dict[tuple[bool, int], list[Made]] = {}
    for m in sorted(made, key=lambda m: m.steps, reverse=True):
        groups.setdefault((m.shortened, m.evaluation_s), []).append(m)
    out: list[list[Made]] = []
    for group in groups.values():
        while group:
            longest = group[0].steps
            run = [m for m in group if m.steps >= SPAN_SHARE * longest][:size]
            out.append(run)
            group = [m for m in group if m not in run]
    return sorted(out, key=lambda run: run_cost([m.steps for m in run]), reverse=True)


def run_cost(steps: Sequence[float]) -> float:
    """A run's cost in evaluation steps of one draw (the unit of a single replay), from
    the evaluation steps of each draw in it."""
    return max(steps) * (1 + ADDED_COST * (len(steps) - 1))


def run_batch(made: Sequence[Made], workdir: str, promtool: str) -> list[Outcome]:
    """Replay one batch (``batches``) and judge each draw of it: a draw by its class's
    verdict, a described case by its own expectations."""
    start = time.monotonic()
    loaded = [_kept(m) for m in made]
    to_replay = [d.case if isinstance(d, Draw) else d for d in loaded]
    stats = _replay_run(to_replay, workdir, promtool, shortened=made[0].shortened)
    took = (time.monotonic() - start) / len(loaded)
    return [Outcome(m.job, d.label, generator.verdict(d, st), took) if isinstance(d, Draw)
            else Outcome(m.job, d.name, evaluate.problems(d, st), took)
            for m, d, st in zip(made, loaded, stats, strict=True)]


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


def replay_all(jobs: Sequence[Item], promtool: str, workers: int = 2, size: int = 10
               ) -> Iterator[Outcome]:
    """Every job's outcome (a draw's or a described case's), as its batch ends."""
    with tempfile.TemporaryDirectory() as workdir, \
            ProcessPoolExecutor(max_workers=workers) as pool:
        made = list(pool.map(make, jobs, [workdir] * len(jobs)))
        futures = {pool.submit(run_batch, b, workdir, promtool): b
                   for b in batches(made, max(1, size))}
        for future in as_completed(futures):
            try:
                outcomes = future.result()
            except Exception as e:  # reported per draw: the sweep goes on
                outcomes = failed_batch(futures[future], e)
            yield from outcomes


def failed_batch(run: Sequence[Made], error: BaseException) -> list[Outcome]:
    """Each draw of a run whose replay failed (promtool crashed or was killed), failed
    with the error's last line: a sweep of hours reports it and goes on (raised, it held
    back every outcome until the pool's last run ended, then printed none)."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    problem = f"its run's replay failed: {lines[-1][:300]}"
    return [Outcome(m.job, k.label if isinstance(k := _kept(m), Draw) else k.name, [problem],
                    0.0) for m in run]


def _kept(m: Made) -> Draw | Case:
    """The draw or described case ``make`` kept on disk."""
    kept: Draw | Case = pickle.loads(Path(m.path).read_bytes())
    return kept


# --- the described cases ----------------------------------------------------------------------
def described(name: str) -> Case:
    """A described case by name: ``cases.ALL`` and the first wave's."""
    for make_case in cases.ALL:
        if make_case.__name__ == name:
            return make_case()
    return next(c for c in converted.first_wave() if c.name == name)


__all__ = ["SHORTENED", "Item", "Job", "Made", "Outcome", "batches", "described",
           "failed_batch", "make", "replay_all", "run_batch", "run_cost"]
