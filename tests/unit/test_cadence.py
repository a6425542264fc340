"""The sampler's pace per cgroup (exporter/sampling/cadence.py): fast only near the limit, on a
ramp, after a notification or while young; once per clock second otherwise."""

from __future__ import annotations

import threading
from pathlib import Path

from exporter.host.paths import MemoryHierarchy
from exporter.model import CgroupRef
from exporter.sampling import cadence
from exporter.sampling.cadence import Cadence
from exporter.sampling.sampler import PeakSampler

MiB = 1 << 20
LIMIT = 1024 * MiB


def reads(c: Cadence, start: float, seconds: float, usage: int, tick: float = 0.2,
          lifetime: int | None = None) -> list[float]:
    """The ticks at which ``c`` is read over ``seconds`` of 200 ms ticks."""
    out = []
    for i in range(int(seconds / tick)):
        now = start + i * tick
        if cadence.due(c, now):
            cadence.observe(c, now, usage, lifetime, LIMIT)
            out.append(now)
    return out


def test_a_still_cgroup_far_from_its_limit_is_read_once_per_clock_second() -> None:
    c = Cadence()
    got = reads(c, 100.1, 10.0, 100 * MiB)
    assert sorted({int(t) for t in got}) == list(range(100, 110))  # every second has one
    assert len(got) == 10


def test_near_the_limit_every_tick() -> None:
    c = Cadence()
    assert len(reads(c, 100.0, 2.0, int(0.85 * LIMIT))) == 10


def test_a_ramp_switches_to_every_tick_and_back_after_the_hold() -> None:
    c = Cadence()
    cadence.observe(c, 100.0, 100 * MiB, None, LIMIT)
    assert not cadence.due(c, 100.2)
    cadence.observe(c, 101.0, 150 * MiB, None, LIMIT)  # +50 MiB in a second: a ramp
    got = reads(c, 101.2, 8.0, 150 * MiB)  # then still
    fast = [t for t in got if t < 101.0 + cadence.FAST_HOLD]
    assert len(fast) == 24  # every tick of the hold
    assert len(got) - len(fast) == 4  # then once a second: 106, 107, 108, 109


def test_small_moves_and_falls_are_no_ramp() -> None:
    assert not cadence.is_ramp(100 * MiB, 110 * MiB, LIMIT)  # under the floor and 2 %
    assert not cadence.is_ramp(500 * MiB, 100 * MiB, LIMIT)
    assert cadence.is_ramp(100 * MiB, 100 * MiB + cadence.RISE_FLOOR, None)
    assert not cadence.is_ramp(None, 900 * MiB, LIMIT)  # a first reading


def test_a_lifetime_peak_rise_is_a_burst_in_between() -> None:
    c = Cadence()
    cadence.observe(c, 100.0, 100 * MiB, 400 * MiB, LIMIT)
    cadence.observe(c, 101.0, 100 * MiB, 600 * MiB, LIMIT)
    assert cadence.due(c, 101.2)


def test_a_lifetime_peak_that_creeps_a_few_pages_is_no_burst() -> None:
    """An idle process's runtime or the kernel charges a few pages now and then: the
    lifetime peak creeps above the last reading by far less than a ramp. A quiet cgroup
    stays quiet (v2 guest: it was read every tick for 5 s after each such creep)."""
    c = Cadence()
    cadence.observe(c, 100.1, 20 * MiB, 20 * MiB, LIMIT, watched=True)
    cadence.observe(c, 105.0, 20 * MiB, 20 * MiB + 64 * 4096, LIMIT, watched=True)
    assert c.quiet and not cadence.due(c, 105.2)
    assert cadence.next_due(c, 105.2) == 110.0


def test_no_slow_pace_where_it_does_not_fit() -> None:
    assert cadence.adaptive(0.2, 15.0)
    assert not cadence.adaptive(1.0, 15.0)  # ticks no faster than the slow pace
    assert not cadence.adaptive(0.2, 1.5)  # a window that could miss a slow reading
    assert cadence.quiet_fits(0.2, 30.0)
    assert not cadence.quiet_fits(0.2, 5.0)  # could miss a quiet reading
    assert cadence.threshold(LIMIT) == int(cadence.NEAR * LIMIT)
    assert cadence.threshold(None) is None


def test_a_watched_still_cgroup_under_half_its_limit_is_read_once_per_quiet_period() -> None:
    c = Cadence()
    got = []
    for i in range(100):  # 20 s of 200 ms ticks
        now = 100.1 + i * 0.2
        if cadence.due(c, now):
            cadence.observe(c, now, 100 * MiB, 100 * MiB, LIMIT, watched=True)
            got.append(now)
    assert [int(t) for t in got] == [100, 105, 110, 115]
    assert cadence.next_due(c, 116.0) == 120.0


def test_above_half_or_unwatched_is_the_slow_pace() -> None:
    for usage, watched in ((600 * MiB, True), (100 * MiB, False)):
        c = Cadence()
        cadence.observe(c, 100.1, usage, None, LIMIT, watched)
        assert not c.quiet and cadence.next_due(c, 100.5) == 101.0


def test_what_the_kernel_watches() -> None:
    assert cadence.kernel_watches(1, True, None, LIMIT)
    assert not cadence.kernel_watches(1, False, None, LIMIT)  # no threshold armed
    assert cadence.kernel_watches(2, False, 500 * MiB, LIMIT)
    assert not cadence.kernel_watches(2, False, 900 * MiB, LIMIT)  # a peak there before
    assert not cadence.kernel_watches(2, False, None, LIMIT)  # no memory.peak
    assert not cadence.kernel_watches(1, True, None, None)  # no limit: nothing to near


def test_a_quiet_cgroup_that_ramps_is_fast_at_once() -> None:
    c = Cadence()
    cadence.observe(c, 100.1, 100 * MiB, 100 * MiB, LIMIT, watched=True)
    assert c.quiet
    cadence.observe(c, 105.0, 150 * MiB, 150 * MiB, LIMIT, watched=True)
    assert not c.quiet and cadence.due(c, 105.2) and cadence.next_due(c, 105.2) == 105.2


def test_the_pace_wakes_at_the_next_cgroup_due() -> None:
    pace = cadence.Pace(adaptive=True, quiet=True)
    pace.track(["a", "b"], 100.1, young=lambda p: p == "b")
    assert sorted(pace.due(100.1)) == ["a", "b"]
    pace.observe("a", 100.1, 100 * MiB, 100 * MiB, LIMIT, watched=True)
    pace.observe("b", 100.1, 100 * MiB, 100 * MiB, LIMIT, watched=True)
    assert pace.next_at(100.1, 0.2) == 100.1 + 0.2  # b is young: fast
    pace.track(["a"], 100.3, young=lambda _: False)
    assert pace.next_at(100.3, 0.2) == 105.0 and pace.due(100.3) == []
    pace.wake({"a"}, 100.3)
    assert pace.due(100.5) == ["a"]


def test_a_scrape_that_hands_the_sampler_new_cgroups_wakes_it() -> None:
    """While every cgroup is still the sampler sleeps up to its quiet pace; a scrape that
    finds a cgroup it did not have (a tracked one is found by scrapes alone) ends that
    sleep, so the new cgroup's kill counters are read as a baseline before a fast kill.
    The same cgroups handed again do not wake it."""
    sampler = PeakSampler(0.2, 30.0)
    h = MemoryHierarchy(Path("/nonexistent"), 1)
    woken = threading.Event()

    def sleep_once() -> None:
        sampler._wakeups.wait(600)
        woken.set()

    try:
        threading.Thread(target=sleep_once, daemon=True).start()
        sampler.set_tracked(h, [CgroupRef("tracked/a")])
        assert woken.wait(60), "the sampler slept on"
        woken.clear()
        threading.Thread(target=sleep_once, daemon=True).start()
        sampler.set_tracked(h, [CgroupRef("tracked/a")])
        assert not woken.wait(1.0), "the same cgroups woke it"
    finally:
        sampler._wakeups.stop()
