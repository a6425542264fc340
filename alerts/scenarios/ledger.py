"""A sweep's record across runs: ``scripts/replay_draws.py`` prints one line per draw
(``ok`` or ``FAIL``, class, seed, parameters, variant) under a header naming the rules'
commit. Thirty draws of every class take longer than one working session, so a sweep is
continued (``--first``) in several runs; ``merge`` reads their logs in order, the later
result of a draw replacing the earlier (a draw re-run at newer rules), and ``summary``
prints the pass count per class with the seeds covered and those that failed, and how
many draws were replayed at each set of rules and scenarios (``fingerprint``: a commit
names a checkout, not what was replayed; most commits change neither)."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from alerts import alertmanager
from alerts.generate import rules_yaml

HEADER = "# rules at "
_HEADER = re.compile(r"^# rules at (?P<rules>\S+)(?: \((?P<fingerprint>rules [0-9a-f]+, "
                     r"scenarios [0-9a-f]+)\))?")
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
    fingerprint: str = ""  # what was replayed ("" in logs written before it was printed)


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big") + part)
    return h.hexdigest()[:12]


# Modules that run a sweep and keep its record: they decide no draw's series or verdict.
_TOOLING = ("ledger.py", "sweep.py")


def _code(source: str) -> bytes:
    """A module's code without its docstrings and comments: naming a failing seed in a
    class's docstring changes no draw."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:]  # type: ignore[attr-defined]
    return ast.dump(tree).encode()


def fingerprint() -> str:
    """What a sweep replays, by content: the shipped rules as promtool loads them (parsed:
    not their comments) with the Alertmanager configuration the notifications are
    counted through, and the code of the scenario package that draws each seed's series
    and judges them (not its docstrings)."""
    here = Path(__file__).resolve().parent
    sources = sorted(p for p in here.glob("*.py") if p.name not in _TOOLING)
    # The rules as parsed (their comments, each series' help, change no evaluation) and
    # the Alertmanager inhibitions the notifications are counted through.
    rules = json.dumps({"rules": yaml.safe_load(rules_yaml()),
                        "alertmanager": alertmanager.config()}, sort_keys=True)
    return (f"rules {_digest([rules.encode()])}, scenarios "
            f"{_digest(p.name.encode() + _code(p.read_text(encoding='utf-8')) for p in sources)}")


def header(commit: str, replayed: str) -> str:
    """A log's first line: the checkout's commit and the fingerprint of what it replays."""
    return f"{HEADER}{commit} ({replayed})"


def line(label: str, variant: str, seconds: float, problems: list[str]) -> str:
    """What the script prints for one draw (``label``: ``Draw.label``)."""
    shown = f"{label} variant={variant} ({seconds:.0f}s/draw)"
    return f"FAIL {shown}: {'; '.join(problems)}" if problems else f"ok   {shown}"


def parse(text: str) -> list[Result]:
    """The draws of one log, in order; lines that are not a draw's are skipped."""
    rules = replayed = ""
    out: list[Result] = []
    for line in text.splitlines():
        if m := _HEADER.match(line):
            rules, replayed = m["rules"], m["fingerprint"] or ""
        elif m := _LINE.match(line):
            out.append(Result(m["cls"], int(m["seed"]), m["variant"], m["verdict"] == "ok",
                              rules, m["problems"] or "", replayed))
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
    variant and the rules it failed at; then the total, and how many of the draws were
    replayed at each fingerprint (one line: the whole sweep replayed the same rules)."""
    classes = list(classes)
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
    shown = [r for r in latest.values() if r.cls in classes]
    lines.append(f"{'all':<26} {sum(r.passed for r in shown):>3}/{len(shown):<3}")
    counts = Counter(r.fingerprint for r in shown)
    for replayed, n in sorted(counts.items(), key=lambda kv: (-kv[1], not kv[0], kv[0])):
        commits = sorted({r.rules for r in shown if r.fingerprint == replayed and r.rules})
        lines.append(f"{n} draws at {replayed or 'rules and scenarios not recorded'}"
                     f" (commits: {', '.join(commits) or 'none'})")
    return lines
