"""The adversarial cases (``alerts.scenarios.cases``) replayed through the shipped rules with
promtool, counting notifications as a pager would receive them (the shipped inhibition
applied); the pieces that build and read them, tested without promtool."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from alerts.generate import rules_yaml
from alerts.scenarios import cases, converted, evaluate, sweep
from alerts.scenarios.evaluate import Stat
from alerts.scenarios.recording import STALE, Case, Recorder, Scrape, rollouts
from exporter.promql import CONFIG, HOUR, MINUTE

PROMTOOL = shutil.which("promtool")
FIXTURES = Path(__file__).resolve().parents[2] / "alerts" / "scenarios" / "fixtures"
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")


# The described cases that replay days of series each (5-14 minutes here) and whose
# classes the drawn scenarios of the replay tier cover (test_generated.py: slow leaks,
# nightly batches, exporter gaps and rollouts): marked replay_long, left out of
# .ci/run's replay tier to keep it within its 15 minutes; `pytest -m replay_long`.
LONG = ("gaps", "rollout", "nightly_plateau", "one_page", "week_leak")


def _case_param(make: Callable[[], Case]) -> object:
    marks = [pytest.mark.replays(make.__name__)]
    if make.__name__ in LONG:
        marks.append(pytest.mark.replay_long)
    return pytest.param(make, id=make.__name__, marks=marks)


@needs_promtool
@pytest.mark.prometheus
@pytest.mark.replay
@pytest.mark.xdist_group("drawn")
@pytest.mark.parametrize("make", [_case_param(f) for f in cases.ALL])
def test_case_passes_on_the_shipped_rules(make: Callable[[], Case],
                                          replayed: dict[sweep.Item, sweep.Outcome]) -> None:
    found = replayed[make.__name__].problems
    assert not found, found


@needs_promtool
@pytest.mark.prometheus
@pytest.mark.replay
@pytest.mark.xdist_group("drawn")
@pytest.mark.replays(*converted.first_wave_names())
def test_first_wave_scenarios_pass(replayed: dict[sweep.Item, sweep.Outcome]) -> None:
    bad = {c.name: replayed[c.name].problems for c in converted.first_wave()
           if replayed[c.name].problems}
    assert not bad


@needs_promtool
@pytest.mark.prometheus
def test_a_recorded_real_run_pages_once_before_the_kill(tmp_path: Path) -> None:
    """A real exporter's series from the end-to-end run (a process grew to its OOM kill,
    the exporter restarted while paged), replayed through the rules at that run's
    scale."""
    assert PROMTOOL is not None
    case, scale = converted.recorded(FIXTURES / "e2e-run.json")
    rules = tmp_path / "headroom.rules.yaml"
    rules.write_text(rules_yaml(CONFIG.scaled(scale).replace(hold_s=20, keep_firing_s=30)))
    stats = evaluate.replay(case, [rules], tmp_path, PROMTOOL)
    assert not evaluate.problems(case, stats), (evaluate.problems(case, stats), stats)
    assert any(v is None or v == STALE for vals in case.series.values() for v in vals), \
        "the recording holds the exporter restart's gap"


# --- the machinery, without promtool -----------------------------------------------------------
def test_a_failed_scrape_marks_series_stale_and_up_zero() -> None:
    def scrape(t: int) -> Scrape:
        return Scrape("a", ok=not 2 * MINUTE <= t < 4 * MINUTE)

    rec = Recorder(range(0, 6 * MINUTE + 1, MINUTE), scrape)
    rec.put("m", {"x": "1"}, lambda t: 5.0)
    assert rec.out['m{x="1", instance="a", job="headroom"}'] == [
        5.0, 5.0, STALE, None, 5.0, 5.0, 5.0]
    assert rec.out['up{instance="a", job="headroom"}'] == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]


def test_a_rollout_ends_one_instance_and_starts_another() -> None:
    rec = Recorder(range(0, 5 * MINUTE + 1, MINUTE), rollouts([2 * MINUTE]))
    rec.put("m", {}, lambda t: 1.0)
    old, new = 'm{instance="10.0.0.10:9847", job="headroom"}', \
        'm{instance="10.0.0.11:9847", job="headroom"}'
    assert rec.out[old] == [1.0, 1.0, STALE, None, None, None]
    assert rec.out[new] == [None, None, None, 1.0, 1.0, 1.0]


def test_compress_writes_promtool_notation() -> None:
    assert evaluate.compress([1.0, 2.0, 3.0, None, None, 5.0]) == "1+1x2 _x2 5"
    assert evaluate.compress([5.0, 5.0, 5.0, 5.0]) == "5+0x3"
    assert evaluate.compress([1.0, STALE, None, 4.0]) == "1 stale _ 4"
    assert evaluate.compress([0.1, 0.2, 0.4]) == "0.1 0.2 0.4"


def test_parse_got_adds_episodes_and_keeps_the_first_over_chunks() -> None:
    text = (
        '    got: {alertname="A", container="vllm", pod="p", severity="critical", '
        'stat="episodes"} 1E+00, {alertname="A", container="vllm", pod="p", '
        'severity="critical", stat="first"} 7.2E+03\n'
        '    got: {alertname="A", container="vllm", pod="p", severity="critical", '
        'stat="episodes"} 2E+00, {alertname="A", container="vllm", pod="p", '
        'severity="critical", stat="first"} 9E+03\n'
    )
    assert evaluate.parse_got(text) == {("A", "critical", "p", "vllm"): Stat(3, 7200.0)}


def test_problems_find_flapping_early_and_late_pages() -> None:
    page = ("HeadroomMemoryFillingUp", "critical", "p", "vllm")
    case = Case("c", "x", "", 60, 10 * HOUR, {}, killed=True, expect=frozenset({page}),
                min_lead_s={page: 45 * MINUTE}, max_page_lead_s=2 * HOUR)
    end = case.end_s
    assert evaluate.problems(case, {page: Stat(1, end - HOUR)}) == []
    assert "notified 2x" in evaluate.problems(case, {page: Stat(2, end - HOUR)})[0]
    assert "before the kill (needs" in evaluate.problems(case, {page: Stat(1, end - 60)})[0]
    assert "early" in evaluate.problems(case, {page: Stat(1, end - 5 * HOUR)})[0]
    assert "never notified" in evaluate.problems(case, {})[0]
    other = ("HeadroomMemoryNearLimit", "critical", "p", "")
    assert "unexpected" in evaluate.problems(case, {page: Stat(1, end - HOUR),
                                                    other: Stat(1, 0.0)})[0]


def test_notifications_apply_the_shipped_inhibition() -> None:
    q = evaluate.notified("", inhibit=True)
    assert 'alertname="HeadroomMemoryNearLimit"' in q and "unless" in q
    assert evaluate.notified("1m", inhibit=False) == 'ALERTS{alertstate="firing"} offset 1m'


def test_chunks_cover_the_whole_run() -> None:
    case = Case("c", "x", "", 60, 2000 * 60, {})
    spans = evaluate.chunks(case)
    assert spans[-1][0] == case.end_s
    assert sum(s for _, s in spans) == case.end_s
    assert all(s <= evaluate.CHUNK_STEPS * 60 for _, s in spans)
