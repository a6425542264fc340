"""A sweep's record across runs: ``scripts/replay_draws.py`` prints one line per draw
(``ok`` or ``FAIL``, class, seed, parameters, variant) under a header naming the rules'
commit. Thirty draws of every class take longer than one working session, so a sweep is
continued (``--first``) in several runs; ``merge`` reads their logs in order, the later
result of a draw replacing the earlier (a draw re-run at newer rules), and ``summary``
prints the pass count per class with the seeds covered and those that failed."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

HEADER = "# rules at "
_HEADER = re.compile(r"^# rules at (?P<rules>\S+)")
# "FAIL late-leak seed=14 (step=60, ...) variant=shortened (95s/draw): first page ..."
_LINE = re.compile(
    r"^(?P<verdict>ok|FAIL) +(?P<cls>[a-z0-9-]+) seed=(?P<seed>\d+) .*"
    r" variant=(?P<variant>[a-z-]+) \(\d+s/draw\)(?:: (?P<problems>.*))?$")


@dataclass(frozen=True)
class Result:
    cls: str
    seed: int
    variant: str
    passed: bool
    rules: str  # the commit in the log's header ("" without one)
    problems: str


def line(label: str, variant: str, seconds: float, problems: list[str]) -> str:
    """What the script prints for one draw (``label``: ``Draw.label``)."""
    shown = f"{label} variant={variant} ({seconds:.0f}s/draw)"
    return f"FAIL {shown}: {'; '.join(problems)}" if problems else f"ok   {shown}"


def parse(text: str) -> list[Result]:
    """The draws of one log, in order; lines that are not a draw's are skipped."""
    rules = ""
    out: list[Result] = []
    for line in text.splitlines():
        if m := _HEADER.match(line):
            rules = m["rules"]
        elif m := _LINE.match(line):
            out.append(Result(m["cls"], int(m["seed"]), m["variant"], m["verdict"] == "ok",
                              rules, m["problems"] or ""))
    return out


def merge(logs: Iterable[list[Result]]) -> dict[tuple[str, int], Result]:
    """Each draw's latest result (by class and seed: a seed's variant is fixed)."""
    latest: dict[tuple[str, int], Result] = {}
    for results in logs:
        for r in results:
            latest[(r.cls, r.seed)] = r
    return latest


def seed_ranges(seeds: Iterable[int]) -> str:
    """``0-11, 14, 16-17``."""
    ordered = sorted(set(seeds))
    parts: list[str] = []
    start = prev = None
    for s in [*ordered, None]:
        if start is not None and (s is None or prev is None or s != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if s is not None and start is None:
            start = s
        prev = s
    return ", ".join(parts)


def summary(latest: dict[tuple[str, int], Result], classes: Iterable[str]) -> list[str]:
    """One line per class: passed/replayed, the seeds replayed, each failing seed with its
    variant and the rules it failed at."""
    lines = [f"{'class':<26} {'passed':>7}  seeds"]
    for cls in classes:
        mine = sorted((r for (c, _), r in latest.items() if c == cls), key=lambda r: r.seed)
        passed = sum(r.passed for r in mine)
        line = f"{cls:<26} {passed:>3}/{len(mine):<3}  {seed_ranges(r.seed for r in mine)}"
        failed = [f"{r.seed} ({r.variant}{', ' + r.rules if r.rules else ''})"
                  for r in mine if not r.passed]
        if failed:
            line += "; failed: " + ", ".join(failed)
        lines.append(line)
    return lines
