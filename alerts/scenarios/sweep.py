"""Replay many draws through the shipped rules, batched and in parallel: the replay tier
(tests/unit/test_generated.py) and ``scripts/replay_draws.py`` both run their draws here.

Draws that share an evaluation interval, a scrape step and a variant share a promtool
run (``batch.replay``: each draw's pods and instances apart), up to ``size`` per run. A
run lasts as long as its longest draw and evaluates every draw's series at each step:
cheaper per draw where the draws are of one length (a sweep's seeds of one class), not
where spans of 10 h and 227 h share a run (the replay tier took 23 min batched at stop
44, against 14 min for seven fewer draws run alone). What interval a draw has is known only once
it is drawn, so the draws are made twice, in the pool: once to group them, once in the
batch that replays them (a draw's series are far too big to send between processes).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from alerts.generate import rules_yaml

from . import batch, evaluate, generator

Job = tuple[str, int, int]  # class, seed, variant


@dataclass(frozen=True)
class Outcome:
    job: Job
    label: str  # the draw's class, seed and parameters
    problems: list[str]  # what the verdict found wrong (empty: it holds)
    seconds: float  # the promtool run's time, per draw in it


def interval_of(job: Job) -> tuple[Job, int, int]:
    """The job with what it shares a run by: its evaluation interval and scrape step."""
    case = generator.draw(*job).case
    return job, case.evaluation_s, case.step_s


def batches(keyed: Sequence[tuple[Job, int, int]], size: int) -> list[list[Job]]:
    """Jobs that can share a promtool run (one evaluation interval and one variant; one
    scrape step, so that the shared grid stays the draws' own), ``size`` at most per run,
    the biggest runs first."""
    groups: dict[tuple[int, int, int], list[Job]] = {}
    for job, evaluation_s, step_s in keyed:
        groups.setdefault((job[2], evaluation_s, step_s), []).append(job)
    out = [g[i:i + size] for g in groups.values() for i in range(0, len(g), size)]
    return sorted(out, key=len, reverse=True)


def run_batch(jobs: Sequence[Job], workdir: str, promtool: str) -> list[Outcome]:
    """Replay one batch (``batches``) and judge each draw of it."""
    start = time.monotonic()
    draws = [generator.draw(*job) for job in jobs]
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
    return [Outcome(job, d.label, generator.verdict(d, st), took)
            for job, d, st in zip(jobs, draws, stats, strict=True)]


def replay_all(jobs: Sequence[Job], promtool: str, workers: int = 2, size: int = 10
               ) -> Iterator[Outcome]:
    """Every job's outcome, as its batch ends."""
    with tempfile.TemporaryDirectory() as workdir, \
            ProcessPoolExecutor(max_workers=workers) as pool:
        keyed = list(pool.map(interval_of, jobs))
        futures = [pool.submit(run_batch, b, workdir, promtool)
                   for b in batches(keyed, max(1, size))]
        for future in as_completed(futures):
            yield from future.result()


__all__ = ["Job", "Outcome", "batches", "interval_of", "replay_all", "run_batch"]
