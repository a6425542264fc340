"""The flight recorder: per cgroup, the last ``window`` (15 min) of usage at 1 s resolution
(the sampler's maximum in each second) and the scrapes' figures, in bounded ring buffers,
so an OOM document can show the minutes before the kill."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.model import ProcessGroup, TmpfsMount


@dataclass(frozen=True)
class EngineRecord:
    model_name: str
    engine: str
    kv_usage_ratio: Mapping[str, float]
    requests: Mapping[str, float]


@dataclass(frozen=True)
class ScrapeRecord:
    """What one scrape saw of one cgroup, as the flight recorder keeps it."""

    cgroup: str
    usage: int
    limit: int
    unreclaimable: int
    working_set: int
    kinds: Mapping[str, int]
    events: Mapping[str, int]
    processes: tuple[ProcessGroup, ...]  # the largest few
    tmpfs: tuple[TmpfsMount, ...]
    vllm: tuple[EngineRecord, ...] = ()

    def document(self, now: float) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "time": now, "usage": self.usage, "limit": self.limit,
            "unreclaimable": self.unreclaimable, "working_set": self.working_set,
            "kinds": dict(self.kinds), "events": dict(self.events),
            "processes": [{"process": g.name, "count": g.count, "rss_anon": g.rss_anon,
                           "rss_file": g.rss_file, "rss_shmem": g.rss_shmem}
                          for g in self.processes],
            "tmpfs": [{"mount": t.mount, "used": t.used, "size": t.size} for t in self.tmpfs],
        }
        if self.vllm:
            entry["vllm"] = [{"model_name": e.model_name, "engine": e.engine,
                              "kv_usage_ratio": dict(e.kv_usage_ratio),
                              "requests": dict(e.requests)} for e in self.vllm]
        return entry


@dataclass
class _Track:
    usage: deque[tuple[float, int]]
    scrapes: deque[tuple[float, str]]  # (time, compact JSON): a few hundred bytes each


class FlightRecorder:
    """Bounded history per cgroup path. Thread-safe (sampler thread and event loop).

    Memory: per cgroup, ``window`` seconds of (time, usage) pairs and at most
    ``scrape_slots`` scrapes of the last ``window``, each kept as compact JSON."""

    def __init__(self, window: float, scrape_slots: int = 120,
                 clock: Callable[[], float] = time.time) -> None:
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._tracks: dict[str, _Track] = {}
        self._usage_slots = int(window) + 1  # one per second
        self._scrape_slots = scrape_slots
        # Scrapes closer than this are not kept: 60 per window is plenty for a post-mortem,
        # and it bounds memory and CPU whatever the scrape rate.
        self.scrape_spacing = window / 60
        self._last_scrape = -1e18

    def _track(self, path: str) -> _Track:
        t = self._tracks.get(path)
        if t is None:
            t = self._tracks[path] = _Track(deque(maxlen=self._usage_slots),
                                            deque(maxlen=self._scrape_slots))
        return t

    def record_usage(self, readings: Mapping[str, int]) -> None:
        now = self._clock()
        second = float(int(now))
        with self._lock:
            for path, usage in readings.items():
                q = self._track(path).usage
                if q and q[-1][0] == second:
                    if usage > q[-1][1]:
                        q[-1] = (second, usage)  # keep the second's maximum
                else:
                    q.append((second, usage))

    def record_scrape(self, records: Sequence[ScrapeRecord], live: Iterable[str]) -> None:
        """One scrape's figures per cgroup (kept at most every ``scrape_spacing``); cgroups
        not ``live`` are forgotten once their history has aged out."""
        now = self._clock()
        if now - self._last_scrape < self.scrape_spacing:
            return
        self._last_scrape = now
        with self._lock:
            for r in records:
                scrapes = self._track(r.cgroup).scrapes
                while scrapes and scrapes[0][0] < now - self.window:
                    scrapes.popleft()
                scrapes.append((now, json.dumps(r.document(now), separators=(",", ":"))))
            cutoff = now - self.window
            keep = set(live)
            for path in [p for p, t in self._tracks.items() if p not in keep and (
                    not t.usage or t.usage[-1][0] < cutoff)]:
                del self._tracks[path]  # gone for a whole window: forget it

    def history(self, path: str) -> dict[str, Any]:
        cutoff = self._clock() - self.window
        with self._lock:
            t = self._tracks.get(path)
            if t is None:
                return {"usage": [], "scrapes": []}
            return {
                "usage": [[ts, v] for ts, v in t.usage if ts >= cutoff],
                "scrapes": [json.loads(s) for ts, s in t.scrapes if ts >= cutoff],
            }

    def __len__(self) -> int:
        return len(self._tracks)
