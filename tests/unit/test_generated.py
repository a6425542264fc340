"""The replay tier's scenario classes (``alerts.scenarios.generator``): fixed draws of every
class replayed through the shipped rules with promtool, each at one of the three
variants (samples on the evaluations, half way between them, every range 1 ms shorter),
so that every variant runs and every class runs at one. The id says the class, the
property it must show, the seed and the variant; a failure names the draw's parameters
(rerun it with ``scripts/replay_draws.py --seed N --variant V CLASS``).
``scripts/replay_draws.py`` runs 30 draws of each.

The draws are replayed once for the session with the described cases
(test_scenarios.py), in one pool batched as the sweeps batch them (``replayed`` in
conftest.py, ``alerts.scenarios.sweep``: draws of one evaluation interval and rule file,
and of like length, share a promtool run, two runs at a time), and each test reads its
draw's verdict; a test here checks that a batch reports what single runs report. Under
xdist they all go to one worker (``--dist loadgroup``)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from alerts.generate import rules_yaml
from alerts.scenarios import batch, draws, evaluate, generator, sweep
from exporter.promql import duration

PROMTOOL = shutil.which("promtool")
# Classes that replay in under a day of scenario time get a second draw.
SHORT = ("limit-raised", "jobs-beside-leak", "vllm-without-server", "crash-loop", "ramp",
         "sidecar-socket-leak", "two-vllm", "fast-ramp")
# Draws that failed a sweep once, kept as they were: a fast leak under a daily swing whose
# crest at 97 % of the limit paged 14 h before the kill (the daily pattern now holds it);
# one whose crest came within 0.5 % of the limit a day before the kill and kept the page
# on through the trough (the page now ends there, and pages again on the climb); a
# first night's 8-minute batch to 91 % of the limit, whose plateau noise kept the short
# forecast alive into the page's fifth minute (a new high now counts beyond the noise); a
# leak doubling every 15 h that paged 17 minutes ahead (the lasting rate, a day's
# average, held its climb within the pattern: ABOVE_PATTERN now reads it beyond); a
# growing nightly batch with two nights behind it whose batch held at 98 % of the limit
# paged a day before the night that crossed (the medium horizon read the finished ramp
# for half an hour: it now needs new highs); a leak whose bursts reached 97.5 % of the
# limit three hours before one crossed, never paged (the envelope's time to limit held
# the burst's figure still at 3.1 h: it now carries the peaks on by the trend since); a
# healthy cache flushed at irregular times whose tooth, 1.2 times the day's tallest,
# rose 4.7 % of the limit above it and paged on a known pattern (a tooth may now top the
# envelope by 30 % of the teeth's height); a leak out of a daily swing, 1.4 days old at
# the kill, that paged 13 minutes ahead (the envelope's rise over the release window, the
# leak's own climb, held it within the pattern: now at most 6 h of the lasting trend); a
# cache flushed at irregular times over a leak whose tooth topped the day's tallest by 3 %
# of the limit and paged 15 h early (the teeth's share held over a flat floor only: it
# now holds wherever the pattern has teeth, TEETH); another whose killing tooth topped
# the envelope by 4 % of the limit, paged 2 minutes ahead (the day's tallest tooth,
# 10 h old, was read an hour of trend on: PEAK_CARRIED now carries it 7 h on); a leak
# out of a daily swing, 1.9 days old at the kill, that paged 23 minutes ahead (the
# lasting rate read 11 % of the limit a day of its 15.8: the day before still held
# pre-leak hours, so the next crests read 95 % of the limit; the daily pattern is now
# lifted by the recent hours' least rise above the same hours a day ago); a healthy
# step a day old that the lift paged on (the recent hours rose the step above theirs,
# and the hours ahead a day ago already held it: the lift is now at most two days of
# the lasting trend); a sawtooth with teeth every 3.7 h that paged on the tooth two
# before the one that kills, 8 h 26 min ahead (the page's confirm horizon, 6 h, is now
# the teeth's period); a leak of 39 % a day, 1.1 days old, whose crest 2.2 % below the
# limit paged 10 h early (the cap held the lift at 27 %, and the pattern did not hold:
# a rise that ramps now lifts the pattern uncapped, and the pattern holds against it); a
# sawtooth with teeth every 4.2 h that the ramp paged 23 h early (teeth that drift
# through the day rise and fall against yesterday's hours: the ramp now needs a pattern
# without teeth, and compares with the most of the same hours 20 h ago); a leak that paged
# at its kill because the highest floor of the week was the pod's first part-day, before
# any trough (the floor memory now keeps floors read over 22 h of a window at least); a
# reload's step followed by a leak that paged 25 h early (its rise ramped, and the lift
# took all of it though the hours ahead a day ago held the step: a ramp's lift is now at
# most a period of the rise's own growth); a cache flushed at irregular times over a leak
# whose tooth, 7 % taller than the crests before it, paged 11 h 50 min early (teeth drift
# through the day, and ABOVE_PATTERN read the hour against the same hour a day ago as a
# leak that speeds up: it now ignores patterns with teeth); another whose killing tooth,
# 1.23 of the teeth's mean height after crests of at most 1.16, never paged (the envelope
# carried on held the tallest crest seen: it now holds the crest the teeth's spread
# allows, TOOTH_CREST); a leak under a weekly pattern killed on its second Monday morning
# that never paged (the climb back from the weekend was read against the day's envelope,
# Sunday's, and margins that rode the climb: last week's peaks now cap the ceiling); a
# leak under a weekly pattern whose ticket notified four times (it cleared for 80 minutes
# while Saturday's fall handed the lasting rate from the floor to the peaks: the ticket
# now clears only after two hours beyond its clear level).
REGRESSIONS = [("leak-restarted", 15, 0), ("leak-restarted", 25, 1),
               ("nightly-plateau", 28, 1), ("accelerating", 8, 2), ("growing-batch", 12, 0),
               ("bursty-leak", 10, 1), ("jittered-sawtooth-healthy", 4, 1), ("late-leak", 1, 1),
               ("jittered-sawtooth", 4, 1), ("jittered-sawtooth", 5, 2), ("late-leak", 10, 1),
               ("step-up", 1, 1), ("sawtooth", 22, 1), ("late-leak", 14, 2), ("sawtooth", 4, 1),
               ("late-leak", 26, 2), ("reload-then-leak", 24, 0), ("jittered-sawtooth", 8, 2),
               ("jittered-sawtooth", 23, 2), ("weekly-leak", 3, 0), ("weekly-leak", 6, 0)]
# A class's fixed draw is seed 0 unless that replays far longer than the class needs (in
# evaluation steps, what a replay's time follows): then a seed of the first six that
# replays the same property in about half the steps or fewer, at a scrape interval the tier
# still covers (every sweep runs them all). Seed 0 of leak-restarted replays 249 h at
# 90 s (10,000 steps: 5 of the tier's 15 minutes alone; seed 17, 145 h at 120 s, 4,400,
# the shortest of the first 30), of growing-batch 137 h of 30-s scrapes (8,200; its
# regression keeps a 30-s draw), of late-leak 124 h of 30-s scrapes (7,500; its
# regression keeps a 60-s one), of exporter-gaps 103 h at 60 s (6,200), of
# reload-then-leak 101 h of 30-s scrapes (6,100), of daily-flush 5 days at 90 s (4,800;
# seed 1, at 120 s: 3,600), of leak-fixed 5.2 days of 30-s scrapes (15,000; seed 2, 4
# days at 120 s: 2,900). weekly-leak's shortest of the first six, seed 4 (131 h at
# 120 s), is one of its draws not held yet (named in the class's docstring): seed 1 (157 h
# at 90 s, 6,300) holds. flush-leak's seed 0 replays 4.6 days at 60 s (6,700); seed 4,
# 4.1 days at 90 s (4,000).
FIXED_SEED = {"leak-restarted": 17, "growing-batch": 3, "late-leak": 2, "exporter-gaps": 3,
              "reload-then-leak": 3, "weekly-leak": 1, "daily-flush": 1, "leak-fixed": 2,
              "flush-leak": 4}
# Draws the rules do not hold yet, each with what goes wrong: strict, so that a fix shows
# (the sweep's other failing draws are named in their classes' docstrings).
NOT_YET_HELD: dict[tuple[str, int, int], str] = {
    ("jittered-sawtooth", 1, 1): "the tooth's crest, the day's tallest fall (1.29 of the "
    "teeth's mean height, near the 1.3 they reach) plus their spread, comes within 3 h of "
    "the limit at the lasting rate and pages 54 min before the class allows",
    ("quick-teeth", 0, 0): "every hour holds a whole fill and its release, so the quiet "
    "hours' swing (QUIET_SWING) is the teeth's height, not noise, and the noise band "
    "pages while the peaks are that close to the limit: 6 h 9 min ahead (seeds 1 and 2, "
    "47 h and 37 h)",
}
DRAWS = [d for i, cls in enumerate(generator.CLASSES)
         if (d := (cls, FIXED_SEED.get(cls, 0), i % 3)) not in NOT_YET_HELD] + [
    (cls, 1, (i + 1) % 3) for i, cls in enumerate(SHORT)] + REGRESSIONS + list(NOT_YET_HELD)


# Regressions that replay over a week each (175 and 227 h: a third of the tier's time
# between them, beside the class's own fixed draw of 145 h), or four days of 30-s
# scrapes (late-leak 26: 11,300 steps), or seven days of 60-s or 120-s scrapes
# (weekly-leak 3: 10,600 steps; weekly-leak 6: 5,300): marked replay_long, left out
# of .ci/run's replay tier to keep it within its 15 minutes, as the described cases of
# days are (test_scenarios.py); `pytest -m replay_long` runs them, and every sweep
# (scripts/replay_draws.py) draws their class.
LONG = {("leak-restarted", 15, 0), ("leak-restarted", 25, 1), ("late-leak", 26, 2),
        ("weekly-leak", 3, 0), ("weekly-leak", 6, 0)}


def _draw_param(cls: str, seed: int, variant: int) -> object:
    known = NOT_YET_HELD.get((cls, seed, variant))
    marks = [pytest.mark.replays((cls, seed, variant))]
    if known:
        marks.append(pytest.mark.xfail(strict=True, reason=known))
    if (cls, seed, variant) in LONG:
        marks.append(pytest.mark.replay_long)
    return pytest.param(
        cls, seed, variant,
        id=f"{cls}:{generator.PROPERTIES[cls]}:seed{seed}:{generator.VARIANTS[variant]}",
        marks=marks)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
@pytest.mark.prometheus
@pytest.mark.replay
@pytest.mark.xdist_group("drawn")
@pytest.mark.parametrize(("cls", "seed", "variant"), [_draw_param(*d) for d in DRAWS])
def test_a_drawn_scenario_holds_its_class_properties(
        cls: str, seed: int, variant: int,
        replayed: dict[sweep.Item, sweep.Outcome]) -> None:
    o = replayed[(cls, seed, variant)]
    assert not o.problems, f"{o.label} variant={generator.VARIANTS[variant]}: {o.problems}"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
@pytest.mark.prometheus
@pytest.mark.replay
def test_a_batch_reports_what_single_runs_report(tmp_path: Path) -> None:
    """Three draws of a 50-minute ramp in one promtool run (their pods apart, one sample
    grid for scrapes of 20 and 60 s, one of them sampled half way between evaluations)
    notify as each does alone: episodes, first, last and latest beginning."""
    assert PROMTOOL is not None
    cases = [generator.draw("fast-ramp", seed, variant).case
             for seed, variant in ((0, 0), (1, 1), (2, 0))]
    assert {c.step_s for c in cases} == {20, 60}, "the draws' scrape steps differ"
    rules = tmp_path / "headroom.rules.yaml"
    rules.write_text(rules_yaml())
    batched = batch.replay(cases, [rules], tmp_path, PROMTOOL)
    alone = [evaluate.replay(c, [rules], tmp_path, PROMTOOL) for c in cases]
    assert all(alone), "each draw pages alone"
    assert batched == alone


def test_runs_take_draws_of_like_length_and_the_costliest_start_first() -> None:
    def made(cls: str, variant: int, evaluation_s: int, hours: float) -> sweep.Made:
        return sweep.Made((cls, 0, variant), "", evaluation_s, int(hours * 3600))

    runs = sweep.batches([
        made("a", 0, 60, 227), made("b", 1, 60, 137), made("c", 0, 60, 72),
        made("d", 1, 60, 9), made("e", 2, 60, 100), made("f", 0, 90, 72),
        made("g", 1, 60, 10)], size=10)
    assert [[m.job[0] for m in run] for run in runs] == [
        ["a", "b"], ["e"], ["c"], ["f"], ["g", "d"]]
    costs = [sweep.run_cost([m.steps for m in r]) for r in runs]
    assert costs == sorted(costs, reverse=True)


def test_a_described_case_shares_the_pool_as_a_draw_does(tmp_path: Path) -> None:
    """The one pool takes described cases by name beside drawn jobs: each is made to
    disk with what it shares a run by; only variant 2 replays on the shortened rules."""
    case = sweep.described("fast_ramp")
    made = sweep.make("fast_ramp", str(tmp_path))
    assert (made.evaluation_s, made.end_s, made.shortened) == (
        case.evaluation_s, case.end_s, False)
    assert pickle.loads(Path(made.path).read_bytes()) == case
    drawn = sweep.make(("fast-ramp", 0, sweep.SHORTENED), str(tmp_path))
    assert drawn.shortened and drawn.path != made.path


def test_every_class_has_a_stated_property_and_every_variant_runs() -> None:
    assert set(generator.PROPERTIES) == set(generator.CLASSES)
    assert {v for _, _, v in DRAWS} == {0, 1, 2}


def test_draws_are_reproducible_and_differ_by_seed() -> None:
    a, b = generator.draw("ramp", 3), generator.draw("ramp", 3)
    assert a.case.series == b.case.series and a.params == b.params
    assert generator.draw("ramp", 4).params != a.params


def test_the_second_phase_samples_between_evaluations() -> None:
    d = generator.draw("fast-ramp", 0, 1)
    doc = evaluate.test_file(d.case, [], inhibit=True)
    test = doc["tests"][0]
    assert test["interval"] == f"{d.case.step_s * 500}ms"
    assert doc["evaluation_interval"] == duration(max(d.case.step_s, draws.EVAL_S))
    assert test["input_series"][0]["values"].startswith("_ ")


def test_shortened_ranges_lose_a_millisecond() -> None:
    text = "max_over_time(x[5m]) and min_over_time(deriv(y[1h30m])[10m:1m])"
    assert evaluate.shortened(text) == (
        "max_over_time(x[299999ms]) and min_over_time(deriv(y[5399999ms])[599999ms:1m])")


def test_a_page_too_early_fails_the_verdict() -> None:
    d = generator.draw("ramp", 0)
    page = ("HeadroomMemoryFillingUp", "critical", "ramp-0", "vllm")
    early = {page: evaluate.Stat(1, d.case.end_s - 30 * 3600, d.case.end_s)}
    assert any("early" in p for p in generator.verdict(d, early))
    assert any("never notified" in p for p in generator.verdict(d, {}))


def test_a_near_miss_moves_the_earliest_page_back_to_it() -> None:
    """The page may come ``page_max`` before the first sample within three noise
    deviations of the limit: a near miss hours before the kill allows a page then; a
    jump to the limit with none allows only ``page_max``."""
    limit, sigma, page_max = 1000.0, 10.0, 3600

    def near_miss_then_kill(t: int) -> float:
        return 975.0 if t == 20_000 else (1000.0 if t >= 50_000 else 900.0)

    def jump(t: int) -> float:
        return 1000.0 if t >= 50_000 else 900.0

    def lim(t: int) -> float:
        return limit

    assert draws.noise_timed(page_max, near_miss_then_kill, lim, sigma, 50_000, 10) == (
        page_max + 30_000)
    assert draws.noise_timed(page_max, jump, lim, sigma, 50_000, 10) == page_max
    # 969 is 3.1 deviations below the limit: no near miss.
    assert draws.noise_timed(page_max, lambda t: 969.0 if t < 50_000 else 1000.0, lim,
                             sigma, 50_000, 10) == page_max


@pytest.mark.parametrize("cls", sorted(generator.CLASSES))
def test_the_verdict_judges_every_class_without_a_replay(cls: str) -> None:
    """The verdict is a pure function of the draw and the stats: it must answer for
    every class (silent ones expect no page to look up) on no alerts, and name a page the
    class did not expect, without running promtool."""
    d = generator.draw(cls, 0)
    silent = generator.verdict(d, {})
    assert isinstance(silent, list)
    stray = ("HeadroomMemoryFillingUp", "critical", "stray-pod", "vllm")
    loud = generator.verdict(d, {stray: evaluate.Stat(1, d.case.end_s - 3600, d.case.end_s)})
    assert any("stray-pod" in p and "unexpected" in p for p in loud), loud
    assert not any("stray-pod" in p for p in silent)
