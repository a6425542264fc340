"""The replay tier's one pool: every drawn scenario (test_generated.py) and described case
(test_scenarios.py) the session selected, replayed together (``alerts.scenarios.sweep``)."""

from __future__ import annotations

import shutil

import pytest

from alerts.scenarios import sweep


@pytest.fixture(scope="session")
def replayed(request: pytest.FixtureRequest) -> dict[sweep.Item, sweep.Outcome]:
    """The outcome of every draw and described case that a selected test names with
    ``@pytest.mark.replays(...)``, replayed once for the session in one pool: draws and
    cases of one evaluation interval and rule file, and of like length, share a promtool
    run, two runs at a time, the costliest first (so the two processes end together).
    Under xdist, the tests that read it share an ``xdist_group``, so one worker runs it."""
    promtool = shutil.which("promtool")
    assert promtool is not None
    jobs: list[sweep.Item] = list(dict.fromkeys(
        job for item in request.session.items
        for mark in item.iter_markers("replays") for job in mark.args))
    return {o.job: o for o in sweep.replay_all(jobs, promtool, workers=2)}
