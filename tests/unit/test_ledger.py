"""A sweep continued over several runs reads as one pass count per class: the lines
``scripts/replay_draws.py`` prints for each draw parse back (whatever a draw's
parameters or problems hold), a later run's result of a draw replaces the earlier one,
and the summary names every failing seed with the rules it failed at."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from alerts.scenarios import generator, ledger, sweep


def _label(seed: int, **params: float) -> str:
    # A real draw's label, with parameters of every shape Draw.label prints.
    d = generator.draw("fast-ramp", 0, 0)
    return dataclasses.replace(d, seed=seed, params=params).label


def _log(rules: str, *lines: str) -> str:
    return "\n".join([f"{ledger.HEADER}{rules}", *lines, "", "class   passed",
                      "fast-ramp 1/2", "rc=1"])


def test_a_draws_line_parses_back_whatever_its_parameters_and_problems() -> None:
    ok = ledger.line(_label(3, step=20, tiny=1e-7, big=-1234567.0), "phase", 95.4, [])
    failed = ledger.line(_label(14, step=60, pct_day=38.9), "shortened", 12,
                         ["first page 10h02m before the kill (needs 4h10m): early",
                          "3 pager notifications for p (at most 3)"])
    results = ledger.parse(_log("572a2d3", ok, "Traceback (most recent call last):",
                                failed))
    assert results == [
        ledger.Result("fast-ramp", 3, "phase", True, "572a2d3", ""),
        ledger.Result("fast-ramp", 14, "shortened", False, "572a2d3",
                      "first page 10h02m before the kill (needs 4h10m): early; "
                      "3 pager notifications for p (at most 3)"),
    ]


def test_a_later_run_of_a_draw_replaces_the_earlier_and_the_summary_names_each_failure(
) -> None:
    first = ledger.parse(_log(
        "a546872",
        *(ledger.line(_label(s), "shipped", 10, ["late"] if s == 4 else [])
          for s in range(6))))
    second = ledger.parse(_log(
        "572a2d3",
        ledger.line(_label(4), "phase", 10, []),
        ledger.line(_label(7), "phase", 10, ["early"]),
        ledger.line(_label(9), "shipped", 10, [])))
    latest = ledger.merge([first, second])
    assert latest[("fast-ramp", 4)].passed and latest[("fast-ramp", 4)].rules == "572a2d3"
    lines = ledger.summary(latest, ["fast-ramp", "ramp"])
    assert lines[1].split() == ["fast-ramp", "7/8", "0-5,", "7,", "9;", "failed:", "7",
                                "(phase,", "572a2d3)"]
    assert lines[2].split() == ["ramp", "0/0"]


def test_the_summary_counts_the_draws_replayed_at_each_rules_and_scenarios() -> None:
    # A header with a fingerprint (this checkout's) and one written before it was printed:
    # the summary totals both and says how many draws each replayed.
    now = ledger.fingerprint()
    assert ledger.fingerprint() == now  # the same checkout, the same fingerprint
    old = ledger.parse(_log("4806ff3", ledger.line(_label(0), "shipped", 10, []),
                            ledger.line(_label(1), "phase", 10, ["late"])))
    new = ledger.parse("\n".join([ledger.header("a984b9a+changes", now),
                                  ledger.line(_label(2), "shortened", 10, []),
                                  ledger.line(_label(3), "shipped", 10, [])]))
    assert {r.fingerprint for r in new} == {now} and {r.rules for r in new} == {
        "a984b9a+changes"}
    assert {r.fingerprint for r in old} == {""}
    lines = ledger.summary(ledger.merge([old, new]), ["fast-ramp"])
    assert lines[-3].split() == ["all", "3/4"]
    assert lines[-2] == f"2 draws at {now} (commits: a984b9a+changes)"
    assert lines[-1] == "2 draws at rules and scenarios not recorded (commits: 4806ff3)"


def test_the_fingerprint_follows_the_code_not_its_docstrings_or_comments() -> None:
    code = 'def f(x):\n    """Doc."""\n    return x + 1  # why\n'
    assert ledger._code(code) == ledger._code(code.replace("Doc.", "Seed 14 fails."))
    assert ledger._code(code) == ledger._code(code.replace("# why", ""))
    assert ledger._code(code) != ledger._code(code.replace("x + 1", "x + 2"))
    assert ledger._code('"""Module."""\n') == ledger._code("")


def test_seed_ranges() -> None:
    assert ledger.seed_ranges([]) == ""
    assert ledger.seed_ranges([5]) == "5"
    assert ledger.seed_ranges([3, 0, 1, 2, 9, 7, 8, 12, 2]) == "0-3, 7-9, 12"


def test_a_run_whose_replay_fails_fails_its_draws_and_the_sweep_goes_on(
        tmp_path: Path) -> None:
    # A promtool that dies (as one killed mid-run does): each run's draws come back
    # failed with the error, the next run still replays, and the lines parse back.
    dead = tmp_path / "promtool"
    dead.write_text("#!/bin/sh\necho 'panic: runtime error: out of memory' >&2\nexit 2\n")
    dead.chmod(0o755)
    jobs = [("fast-ramp", 0, 0), ("fast-ramp", 1, 1)]
    outcomes = list(sweep.replay_all(jobs, str(dead), workers=1, size=1))
    assert sorted(o.job for o in outcomes) == jobs
    problem = "its run's replay failed: panic: runtime error: out of memory"
    assert all(o.problems == [problem] for o in outcomes)
    printed = "\n".join(ledger.line(o.label, "shipped", o.seconds, o.problems)
                        for o in outcomes)
    assert sorted((r.seed, r.passed, r.problems) for r in ledger.parse(printed)) == sorted(
        (s, False, problem) for _, s, _ in jobs)


def test_the_summary_at_one_fingerprint_leaves_out_draws_of_other_rules(
        tmp_path: Path) -> None:
    # Rules tried and reverted leave later results: --at counts only the draws replayed
    # at the rules asked for, so the earlier result of the same seed is the one counted.
    kept = "rules aaaaaaaaaaaa, scenarios cccccccccccc"
    reverted = "rules bbbbbbbbbbbb, scenarios cccccccccccc"
    first, later = tmp_path / "1.log", tmp_path / "2.log"
    first.write_text("\n".join([ledger.header("4beae29", kept),
                                ledger.line(_label(4), "phase", 10, [])]) + "\n")
    later.write_text("\n".join([ledger.header("7496d62", reverted),
                                ledger.line(_label(4), "phase", 10, ["early"])]) + "\n")
    script = Path(__file__).resolve().parents[2] / "scripts" / "replay_draws.py"

    def summary(*extra: str) -> list[str]:
        out = subprocess.run([sys.executable, str(script), "fast-ramp", "--summary",
                              str(first), str(later), *extra],
                             capture_output=True, text=True, check=False).stdout
        return out.splitlines()

    assert summary()[-2].split() == ["all", "0/1"]
    assert summary("--at", "rules aaaa")[-2].split() == ["all", "1/1"]
    assert summary("--at", "rules aaaa")[-1] == f"1 draws at {kept} (commits: 4beae29)"
