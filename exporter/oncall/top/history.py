"""The local forecast: top's own reads kept per series and fed through the rules'
mirror."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.catalog import KIND_ANON, KIND_KERNEL, KIND_SHMEM
from exporter.oncall import forecast as fc
from exporter.oncall.top.cells import finite
from exporter.oncall.top.local import Cgroup, Key, Pod
from exporter.promql import KIND_DEV_SHM

# The kinds the rules' mirror reads of each cgroup (the pod's /dev/shm is read apart).
HISTORY_KINDS = (KIND_ANON, KIND_SHMEM, KIND_KERNEL)
MAX_POINTS = 6000  # reads kept per series (about 6.7 h at the default windows)


@dataclass
class Histories:
    """The reads of each cgroup (unreclaimable, kinds), process and pod /dev/shm, bounded
    per series (``MAX_POINTS``, and no denser than the short window allows)."""

    windows: fc.Windows = field(default_factory=fc.Windows.of)
    series: dict[tuple[str, ...], deque[fc.Point]] = field(default_factory=dict)
    started: float | None = None  # the first read: series there then were not seen born

    @property
    def min_gap(self) -> float:
        return self.windows.short / 30

    @property
    def keep(self) -> float:
        """The reach of the rules' longest range: two days of floors and envelopes, each
        an hour wider (the hourly minima and maxima), and the envelope's hour offset."""
        return 2 * self.windows.baseline + 3 * self.windows.hour + self.windows.step

    def _add(self, key: tuple[str, ...], now: float, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        h = self.series.setdefault(key, deque(maxlen=MAX_POINTS))
        if h and now - h[-1][0] < self.min_gap:
            return
        h.append((now, value))
        while h and h[0][0] < now - self.keep:
            h.popleft()

    def observe(self, now: float, pods: Mapping[Key, Pod]) -> None:
        if self.started is None:
            self.started = now
        live: set[tuple[str, ...]] = set()
        for p in pods.values():
            for g in p.cgroups:
                base = (p.namespace, p.pod, g.container)
                entries: list[tuple[tuple[str, ...], float | None]] = [
                    (("u", *base), g.unreclaimable)]
                entries += [(("k", *base, k), g.kinds.get(k)) for k in HISTORY_KINDS]
                for key, v in entries:
                    self._add(key, now, v)
                    live.add(key)
            for q in p.processes:
                key = ("p", p.namespace, p.pod, q.container, q.process)
                self._add(key, now, q.held)
                live.add(key)
            if p.shm is not None:
                key = ("s", p.namespace, p.pod)
                self._add(key, now, p.shm)
                live.add(key)
        for key in [k for k in self.series if k not in live]:
            del self.series[key]

    def points(self, *key: str) -> Sequence[fc.Point]:
        return tuple(self.series.get(key, ()))

    def history(self, p: Pod, g: Cgroup) -> fc.History:
        kinds = {k: self.points("k", p.namespace, p.pod, g.container, k)
                 for k in HISTORY_KINDS}
        if g.container == "":
            kinds[KIND_DEV_SHM] = self.points("s", p.namespace, p.pod)
        procs = {q.process: self.points("p", p.namespace, p.pod, q.container, q.process)
                 for q in p.processes if g.container in ("", q.container)}
        return fc.History(p.namespace, p.pod, g.container, finite(g.limit) or 0.0,
                          self.points("u", p.namespace, p.pod, g.container), kinds, procs,
                          watched_since=self.started)

    def process_growth(self, *key: str) -> float | None:
        """The process view's growth: PROCESS_GROWTH's mirror (the last hour's deriv),
        the figure the cluster view reads."""
        pts = self.points(*key)
        if len(pts) < 2:
            return None
        return fc.process_growth({"": pts}, pts[-1][0], self.windows).get("")


def local_forecasts(pods: Mapping[Key, Pod], hist: Histories, now: float
                    ) -> dict[Key, list[fc.Forecast]]:
    out: dict[Key, list[fc.Forecast]] = {}
    for key, p in pods.items():
        out[key] = fc.pod_forecasts((hist.history(p, g) for g in p.cgroups), now,
                                    hist.windows)
    return out
