"""The drawn classes no kill ends: healthy patterns that must stay silent, a raised limit
whose page must clear, a vLLM whose meta alert must name only the listener that broke."""

from __future__ import annotations

import math
import random

from exporter import catalog as c
from exporter.promql import DAY, HOUR, MINUTE

from .draws import Draw, GiB, _healthy, _k, _pod_alerts, _single, _step, _tickets
from .recording import NS, Recorder, steady
from .shapes import Bursts, Modes, Noise, Teeth, _tooth, diurnal, ramp, weekend


def limit_raised(rng: random.Random) -> Draw:
    """A ramp over hours pages; VPA raises the limit in place (x1.5-2.5) soon after and
    the growth stops: the page clears within minutes, nothing fires again."""
    step, pod = _step(rng), "resize-up-0"
    limit = rng.uniform(24, 48) * GiB
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)
    start, length = rng.uniform(1, 4) * HOUR, rng.uniform(3, 8) * HOUR
    base = rng.uniform(0.4, 0.6)
    # The unchanged ramp would kill at start + length; raise 20-40 min before that.
    raise_at = int(start + length - rng.uniform(20, 40) * MINUTE)
    factor = rng.uniform(1.5, 2.5)
    stop = raise_at + 20 * MINUTE

    def u(t: int) -> float:
        return limit * (base + (1 - base) * ramp(min(t, stop), start, start + length)) \
            + noise(t)

    def lim(t: int) -> float:
        return limit * (factor if t >= raise_at else 1.0)

    end = raise_at + 8 * HOUR
    rec = Recorder(range(0, end + 1, step), steady())
    _single(rec, pod, lim, u)
    case = _healthy("limit-raised", step, end, rec, allow=_pod_alerts(pod),
                    max_episodes=1, quiet_after_s=raise_at + 25 * MINUTE)
    return Draw("limit-raised", 0, case, {"step": step, "factor": factor,
                                           "ramp_h": length / HOUR})


def sawtooth_healthy(rng: random.Random) -> Draw:
    """The same cache with constant peaks below the limit for three days: silent."""
    return _steady_fills(rng, "sawtooth-healthy", _step(rng, (60, 90, 120)), "sawtooth-ok-0",
                         (2 * HOUR, 6 * HOUR), (0.5, 0.9), (0.8, 0.9), (0.2, 0.4))


def quick_teeth_healthy(rng: random.Random) -> Draw:
    """A buffer filled and released every 20-120 minutes (KV blocks offloaded and freed,
    a scheduler's batches), each fill 10-25 % of the limit over 30-90 % of the period,
    its constant peaks at 85-93 %, for three days: silent. Every fill is a climb the
    short and medium horizons read, to the same peak as the one before.

    Not held (found in session 59): seeds 3, 7 and 8 (peaks at 92-93 %, a fill every
    25-63 min) page within their first three hours and stay paged; seeds 0-2 hold. The
    quiet swing is the teeth's height where every hour holds a release (the killed
    class quick-teeth says why), and the noise band puts peaks within half of it of
    the limit one excursion from the kill. The mirror's ``peak_headroom_swings`` reads
    0.27-0.37 on those three, 0.53-9.7 on the other seven of seeds 0-9."""
    return _steady_fills(rng, "quick-teeth-healthy", _step(rng, (30, 60, 120)), "quick-ok-0",
                         (20 * MINUTE, 120 * MINUTE), (0.3, 0.9), (0.85, 0.93), (0.1, 0.25))


def _steady_fills(rng: random.Random, name: str, step: int, pod: str,
                  period_s: tuple[float, float], rise: tuple[float, float],
                  peak: tuple[float, float], height: tuple[float, float]) -> Draw:
    """Fills of ``height`` (a share of the limit) over ``rise`` of each period to the
    same ``peak``, released at its end, for three days: silent."""
    limit = rng.uniform(24, 48) * GiB
    period = rng.uniform(*period_s)
    rise_share = rng.uniform(*rise)
    top = rng.uniform(*peak) * limit
    fill = rng.uniform(*height) * limit
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)

    def u(t: int) -> float:
        return top - fill + fill * _tooth(t, period, rise_share) + noise(t)

    rec = Recorder(range(0, 3 * DAY + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    return Draw(name, 0, _healthy(name, step, 3 * DAY, rec),
                {"step": step, "period_h": period / HOUR, "peak": top / limit})


def jittered_sawtooth_healthy(rng: random.Random) -> Draw:
    """The irregular cache (periods 0.6-1.4 of a 2-6 hour mean, teeth 0.7-1.3 of the mean
    height) over a flat floor, its tallest possible tooth at 82-92 % of the limit, for
    three days. Silent once the pattern is known; in its first day a tooth taller than
    every earlier one climbs like a ramp, and one page there is defensible."""
    step, pod = _step(rng, (60, 90, 120)), "jagged-ok-0"
    limit = rng.uniform(24, 48) * GiB
    period = rng.uniform(2, 6) * HOUR
    height = rng.uniform(0.15, 0.3) * limit
    teeth = Teeth(rng, period, rng.uniform(0.5, 0.9), height, 4 * DAY)
    floor = rng.uniform(0.82, 0.92) * limit - teeth.tallest
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)

    def u(t: int) -> float:
        return floor + teeth(t) + noise(t)

    rec = Recorder(range(0, 3 * DAY + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    case = _healthy("jittered-sawtooth-healthy", step, 3 * DAY, rec,
                    allow=_pod_alerts(pod), quiet_after_s=DAY)
    return Draw("jittered-sawtooth-healthy", 0, case,
                {"step": step, "period_h": period / HOUR, "height": height / limit,
                 "top": (floor + teeth.tallest) / limit})


def noisy_flat(rng: random.Random) -> Draw:
    """A flat 55-75 % of the limit under heavy noise (a deviation of 0.5-1.5 % of the
    limit each scrape) for three days: silent (noise is no trend)."""
    step, pod = _step(rng, (20, 30, 60, 120)), "noisy-0"
    limit = rng.uniform(24, 48) * GiB
    level = rng.uniform(0.55, 0.75) * limit
    noise = Noise(rng.randrange(10**6), rng.uniform(0.005, 0.015) * limit)

    def u(t: int) -> float:
        return level + noise(t)

    rec = Recorder(range(0, 3 * DAY + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    return Draw("noisy-flat", 0, _healthy("noisy-flat", step, 3 * DAY, rec),
                {"step": step, "level": level / limit, "sigma": noise.sigma / limit})


def vllm_without_server(rng: random.Random) -> Draw:
    """A vLLM that never had a listener (run-batch) beside one whose /metrics stops
    answering after 1-3 hours: a meta alert for the second only."""
    step = _step(rng)
    limit = rng.uniform(16, 48) * GiB
    level = rng.uniform(0.3, 0.7) * limit
    broke = int(rng.uniform(1, 3) * HOUR)
    end = broke + 2 * HOUR
    rec = Recorder(range(0, end + 1, step), steady())
    for pod, up in (("batch-0", lambda t: 0.0),
                    ("served-0", lambda t: 1.0 if t < broke else 0.0)):
        _single(rec, pod, lambda t: limit, lambda t: level)
        rec.put(c.VLLM_UP.name, {"namespace": NS, "pod": pod, "container": "vllm"}, up)
    case = _healthy("vllm-without-server", step, end, rec, expect=frozenset(
        {_k("HeadroomVLLMScrapeFailing", "warning", "served-0")}))
    return Draw("vllm-without-server", 0, case, {"step": step, "broke_h": broke / HOUR})


def daily_swing(rng: random.Random) -> Draw:
    """Three days of a healthy daily swing of 10-35 % of the limit with noise: silent."""
    step, pod = _step(rng, (60, 90, 120)), "swing-0"
    limit = rng.uniform(16, 64) * GiB
    amp = rng.uniform(0.10, 0.35)
    low = rng.uniform(0.3, 0.88 - amp)
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)
    peak_h = rng.uniform(0, 24)

    def u(t: int) -> float:
        return limit * low + diurnal(t, amp * limit, peak_h) + noise(t)

    rec = Recorder(range(0, 3 * DAY + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    return Draw("daily-swing", 0, _healthy("daily-swing", step, 3 * DAY, rec),
                {"step": step, "amp": amp, "peak": low + amp})


def warm_up(rng: random.Random) -> Draw:
    """A young pod: no series before it starts, loads its model to 50-85 % in 3-30
    minutes, then a small daily swing for 2.5 days: silent."""
    step, pod = _step(rng, (30, 60, 120)), "young-0"
    limit = rng.uniform(16, 64) * GiB
    born = int(rng.uniform(0, 2) * HOUR)
    load = rng.uniform(3, 30) * MINUTE
    level = rng.uniform(0.5, 0.85)
    noise = Noise(rng.randrange(10**6), 0.002 * limit)

    def u(t: int) -> float | None:
        if t < born:
            return None
        return limit * (0.05 + (level - 0.05) * ramp(t, born, born + load)) \
            + diurnal(t, 0.03 * limit) + noise(t)

    end = int(2.5 * DAY)
    rec = Recorder(range(0, end + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    return Draw("warm-up", 0, _healthy("warm-up", step, end, rec),
                {"step": step, "load_min": load / MINUTE, "level": level})


def nightly_plateau(rng: random.Random) -> Draw:
    """Every night a batch adds 20-31 % of the limit in 4-8 minutes, holds it 20-45
    minutes and frees it; three nights, noise: silent."""
    step, pod = _step(rng, (20, 30, 60)), "batch-0"
    limit = rng.uniform(16, 64) * GiB
    noise = Noise(rng.randrange(10**6), 0.003 * limit)
    add, up, hold = rng.uniform(0.2, 0.31), rng.uniform(4, 8) * MINUTE, \
        rng.uniform(20, 45) * MINUTE
    base = rng.uniform(0.5, 0.93 - add)
    at = rng.uniform(0, 22) * HOUR

    def u(t: int) -> float:
        s = (t - at) % DAY
        batch = ramp(s, 0, up) - ramp(s, up + hold, up + hold + 3 * MINUTE)
        return limit * (base + add * batch) + noise(t)

    rec = Recorder(range(0, 3 * DAY + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    return Draw("nightly-plateau", 0, _healthy("nightly-plateau", step, 3 * DAY, rec),
                {"step": step, "add": add, "up_min": up / MINUTE, "top": base + add})


def weekly(rng: random.Random) -> Draw:
    """Nine days of a weekly pattern: weekdays with a daily swing of 5-20 % of the limit
    cresting at 75-88 %, weekends 10-30 % lower, reached and left over 1-6 hours, the
    replay starting on any weekday: silent (Monday's return to the weekday level is
    last week's level, no growth). Not on a weekend: a pod started then has never been
    at its weekday level, and its first Monday is a rise to any rule."""
    step, pod = _step(rng, (60, 90, 120)), "weekly-0"
    limit = rng.uniform(24, 64) * GiB
    amp = rng.uniform(0.05, 0.2)
    crest = rng.uniform(0.75, 0.88)
    drop = rng.uniform(0.1, 0.3)
    edge = rng.uniform(1, 6) * HOUR
    first_day = rng.randrange(5)  # the weekday the replay starts on (0 = Monday)
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)

    def u(t: int) -> float:
        return limit * (crest - amp - drop * weekend(t, first_day, edge)) \
            + diurnal(t, amp * limit) + noise(t)

    end = 9 * DAY
    rec = Recorder(range(0, end + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    return Draw("weekly", 0, _healthy("weekly", step, end, rec),
                {"step": step, "crest": crest, "drop": drop, "first_day": first_day})


def step_up(rng: random.Random) -> Draw:
    """A model reload lifts the level by 10-30 % of the limit within minutes to 75-90 %,
    6-30 hours into a young pod's life, then it holds: no page (a step is no climb to the
    limit). The ticket may forecast a second step a day on: two days of history cannot
    tell one step from a staircase with a day between steps."""
    step, pod = _step(rng, (20, 30, 60, 120)), "reload-0"
    limit = rng.uniform(24, 48) * GiB
    top, jump = rng.uniform(0.75, 0.9), rng.uniform(0.1, 0.3)
    at, up = rng.uniform(6, 30) * HOUR, rng.uniform(1, 8) * MINUTE
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)

    def u(t: int) -> float:
        return limit * (top - jump + jump * ramp(t, at, at + up)) + noise(t)

    end = int(2.5 * DAY)
    rec = Recorder(range(0, end + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    return Draw("step-up", 0, _healthy("step-up", step, end, rec, allow=_tickets(pod)),
                {"step": step, "top": top, "jump": jump})


def saturating(rng: random.Random) -> Draw:
    """A young pod's cache fills toward a cap at 80-90 % of the limit (time constant 3-12
    hours) under a small daily swing, three days: no page. A ticket while it fills is an
    honest forecast (nothing yet says where it stops)."""
    step, pod = _step(rng, (30, 60, 120)), "saturate-0"
    limit = rng.uniform(24, 48) * GiB
    cap, start = rng.uniform(0.8, 0.9) * limit, rng.uniform(0.3, 0.5) * limit
    tau = rng.uniform(3, 12) * HOUR
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)

    def u(t: int) -> float:
        return cap - (cap - start) * math.exp(-t / tau) + diurnal(t, 0.02 * limit) \
            - 0.02 * limit + noise(t)

    rec = Recorder(range(0, 3 * DAY + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    case = _healthy("saturating", step, 3 * DAY, rec, allow=_tickets(pod))
    return Draw("saturating", 0, case,
                {"step": step, "cap": cap / limit, "tau_h": tau / HOUR})


def bursty_healthy(rng: random.Random) -> Draw:
    """A flat 55-70 % of the limit under bursts of traffic (0.5-3 an hour, up to 10-20 %
    of the limit, 1-6 minutes each) for three days: silent (a burst is no trend)."""
    step, pod = _step(rng, (30, 60, 120)), "bursty-ok-0"
    limit = rng.uniform(24, 48) * GiB
    level = rng.uniform(0.55, 0.7) * limit
    size = rng.uniform(0.1, 0.2) * limit
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)
    burst = Bursts(rng, rng.uniform(0.5, 3), 4 * DAY, size, MINUTE, 6 * MINUTE)

    def u(t: int) -> float:
        return level + burst(t) + noise(t)

    rec = Recorder(range(0, 3 * DAY + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    return Draw("bursty-healthy", 0, _healthy("bursty-healthy", step, 3 * DAY, rec),
                {"step": step, "level": level / limit, "burst": size / limit})


def mode_switch(rng: random.Random) -> Draw:
    """Two working sets taking turns (adapters loaded and dropped, a long-context tenant
    that comes and goes): low at 45-60 % of the limit, high at 78-90 %, each held 1-10 h,
    each switch made over 2-20 minutes, three days: silent once a day of history shows
    the high set recurring. The first switch of a young pod climbs like a ramp toward
    the limit with nothing yet to say where it stops, and one page there is defensible."""
    step, pod = _step(rng, (30, 60, 120)), "modes-0"
    limit = rng.uniform(24, 48) * GiB
    low, high = rng.uniform(0.45, 0.6), rng.uniform(0.78, 0.9)
    modes = Modes(rng, (1, 10), 3 * DAY)
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)

    def u(t: int) -> float:
        return limit * (low + (high - low) * modes(t)) + noise(t)

    rec = Recorder(range(0, 3 * DAY + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    case = _healthy("mode-switch", step, 3 * DAY, rec, allow=_pod_alerts(pod),
                    quiet_after_s=DAY)
    return Draw("mode-switch", 0, case, {"step": step, "low": low, "high": high,
                                         "switches": len(modes.starts)})


def daily_flush(rng: random.Random) -> Draw:
    """A cache (or a leak a scheduled restart clears) emptied about once a day, every
    20-36 h, each fill climbing 25-45 % of the limit to the same peak at 80-90 %, five
    days: silent. A fill slower than a day has no teeth and its climb spans the day's
    envelope: the day after a release, the peaks that recur are the ones before it.
    Tickets are allowed: a fill that has climbed all day is a leak to any forecast until
    its release."""
    step, pod = _step(rng, (60, 90, 120)), "daily-flush-0"
    limit = rng.uniform(24, 48) * GiB
    period = rng.uniform(20, 36) * HOUR
    peak = rng.uniform(0.8, 0.9) * limit
    height = rng.uniform(0.25, 0.45) * limit
    rise = rng.uniform(0.85, 0.97)
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)

    def u(t: int) -> float:
        return peak - height + height * _tooth(t, period, rise) + noise(t)

    rec = Recorder(range(0, 5 * DAY + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    case = _healthy("daily-flush", step, 5 * DAY, rec, allow=_tickets(pod))
    return Draw("daily-flush", 0, case, {"step": step, "period_h": period / HOUR,
                                         "peak": peak / limit})


def leak_fixed(rng: random.Random) -> Draw:
    """A leak (4-25 % of the limit a day, from 50-60 %, under a daily swing of 0-10 %)
    that tickets and pages; when its memory first reaches 93-99 % of the limit the
    leaking process is restarted in place, no kill (the on-call's fix, or a supervisor's
    restart of the engine): the memory is back where it started and stays there, with
    its swing, for a day and a half. Every alert clears within the hour of the fix and
    nothing notifies again.

    Found in session 58, no class before it: the page kept notifying for 22 hours after
    the fix and the ticket came back five hours after it (seeds 2 and 4). The envelope
    of the day's peaks still held the last peaks, and its rise (the leak's) read as the
    peaks' lasting growth. The floor as it stood before the fall is now held while the
    memory stays below it (FALLEN_FLOOR): no lasting growth is read until the memory
    climbs back to it or the envelope has left the peaks before it."""
    step, pod = _step(rng, (30, 60, 120)), "fixed-0"
    limit = rng.uniform(24, 48) * GiB
    base, rate = rng.uniform(0.5, 0.6) * limit, rng.uniform(0.04, 0.25) * limit / DAY
    amp = rng.uniform(0.0, 0.1) * limit
    noise = Noise(rng.randrange(10**6), rng.uniform(0.001, 0.003) * limit)
    reach = rng.uniform(0.93, 0.99) * limit

    def leaking(t: int) -> float:
        return base + rate * t + diurnal(t, amp) + noise(t)

    fixed_at = next(t for t in range(0, 30 * DAY, step) if leaking(t) >= reach)

    def u(t: int) -> float:
        return leaking(t) if t < fixed_at else base + diurnal(t, amp) + noise(t)

    end = fixed_at + 36 * HOUR
    rec = Recorder(range(0, end + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    case = _healthy("leak-fixed", step, end, rec, allow=_pod_alerts(pod),
                    quiet_after_s=fixed_at + HOUR)
    return Draw("leak-fixed", 0, case, {"step": step, "pct_day": rate * DAY / limit * 100,
                                        "fixed_d": fixed_at / DAY, "reach": reach / limit})
