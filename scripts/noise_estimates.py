#!/usr/bin/env python3
"""Compare the quiet hours' swing the rules read (QUIET_SWING: the lower quartile of each
hour's four deviations from its least-squares line, as the forecast mirror computes it)
with one read from the figures' successive differences (four deviations from the
median absolute difference), on drawn scenarios: where every hour holds a release
(quick teeth), the first is the teeth's height and the second is still the noise.

    python3 scripts/noise_estimates.py quick-teeth-healthy:3 noisy-flat:7 daily-swing:0

For each draw: both swings as a share of the limit, the headroom above the peaks'
envelope, and that headroom in each swing (the page's noise band is below 0.5), read
at 2.5 days or the draw's end.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.scenarios import generator
from exporter.oncall import forecast as fc
from exporter.oncall.forecast.series import envelope, quiet_swing

Point = tuple[float, float]
HOUR, DAY = 3600.0, 86400.0


def differences_swing(points: Sequence[Point], now: float, every: float = 300.0
                      ) -> float | None:
    """The lower quartile over the last day of each hour's swing read from successive
    differences: four deviations, the deviation being the median absolute difference
    over 0.6745 * sqrt(2) (differences of white noise deviate by sqrt(2) of it)."""
    swings = []
    t = now - DAY
    while t < now:
        hour = [v for at, v in points if t - HOUR < at <= t]
        steps = [abs(b - a) for a, b in itertools.pairwise(hour)]
        if len(steps) >= 5:
            swings.append(4 * statistics.median(steps) / (0.6745 * math.sqrt(2)))
        t += every
    swings.sort()
    return swings[len(swings) // 4] if swings else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("draws", nargs="+", help="CLASS:SEED")
    args = parser.parse_args(argv)
    w = fc.Windows.of()
    for spec in args.draws:
        cls, seed = spec.rsplit(":", 1)
        case = generator.draw(cls, int(seed)).case
        memory = next(v for k, v in case.series.items()
                      if k.startswith("headroom_memory_unreclaimable_bytes"))
        limits = next(v for k, v in case.series.items()
                      if k.startswith("headroom_memory_limit_bytes"))
        points = [(i * case.step_s, float(v)) for i, v in enumerate(memory) if v is not None]
        limit = float([v for v in limits if v is not None][-1])
        now = min(points[-1][0], 2.5 * DAY)
        seen = [p for p in points if p[0] <= now]
        quiet, by_steps = quiet_swing(seen, now, w), differences_swing(seen, now)
        peaks = envelope(seen, now, w)
        if peaks is None or by_steps is None or quiet <= 0 or by_steps <= 0:
            print(f"{spec}: too short to read")
            continue
        headroom = limit - peaks
        print(f"{spec:26s} step {case.step_s:4d} s  quiet swing {quiet / limit:7.2%}"
              f"  by differences {by_steps / limit:7.2%}  headroom {headroom / limit:6.2%}"
              f"  in swings {headroom / quiet:6.2f} -> {headroom / by_steps:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
