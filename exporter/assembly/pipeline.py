"""One scrape: discover cgroups, run each source in registry order with a time limit, join
the results. Nothing here blocks the event loop, and nothing here builds or starts anything
(``exporter/assembly/factory.py`` does, once).

A source that fails, times out or raises is reported with
``headroom_collector_success{collector} 0`` and one log line per distinct error; its
series are missing from that scrape (or, for a partial result, its data is still rendered),
everything else is served. A source still running from an earlier scrape (stuck on a hung
file) is not started again until it returns, so threads cannot pile up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from exporter.assembly.discovery import Discovered, Discovery
from exporter.collectors import procfs
from exporter.contract.source import Context, Registered, Result, Results, Source, in_thread
from exporter.exposition.join import Snapshot, join
from exporter.host.degraded import DEGRADED
from exporter.model import CollectorResult, PodDirectory
from exporter.oom import tally
from exporter.postmortem.wiring import PostMortem
from exporter.sampling.sampler import PeakSampler

log = logging.getLogger(__name__)
T = TypeVar("T")

DISCOVERY = "discovery"  # reported like a source, but never off


@dataclass
class _Guard:
    """Per-source state: in-flight flag and the last error logged."""

    running: bool = False
    last_error: str = ""


@dataclass(frozen=True)
class Named:
    """A built source and its registry entry."""

    spec: Registered
    source: Source[object]

    @property
    def name(self) -> str:
        return self.spec.name


def _collector(source: Source[object], ctx: Context) -> Callable[[], Awaitable[Result[object]]]:
    return lambda: source.collect(ctx)


class Pipeline:
    def __init__(
        self,
        discovery: Discovery,
        sources: Sequence[Named],
        timeout: float,
        pods: PodDirectory | None = None,
        sampler: PeakSampler | None = None,
        postmortem: PostMortem | None = None,
    ) -> None:
        self.discovery = discovery
        self.sources = tuple(sources)
        self.timeout = timeout
        self.pods = pods
        self.sampler = sampler
        self.postmortem = postmortem
        self._guards: dict[str, _Guard] = {}
        self._inflight: asyncio.Task[Snapshot] | None = None

    async def snapshot(self) -> Snapshot:
        """Concurrent scrapes share one collection (two Prometheus replicas, a curl)."""
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._collect())
        return await asyncio.shield(self._inflight)

    async def _collect(self) -> Snapshot:
        outcomes: list[CollectorResult] = []
        found = await self._guarded(DISCOVERY, self._discover, outcomes)
        d = found.data if found is not None else None
        if d is not None and self.sampler is not None:
            self.sampler.set_tracked(d.hierarchy, d.refs)
        refs = d.refs if d is not None else ()
        results = Results()
        # One after another: they are mostly CPU-bound Python, and running them in
        # parallel threads only adds GIL hand-offs (measured: about 2x the CPU per scrape).
        for s in self.sources:
            if d is None and s.spec.needs_cgroups:
                continue  # discovery failed: its failure is reported, not theirs
            ctx = Context(d.hierarchy if d is not None else None, refs, self.pods, results)
            result = await self._guarded(s.name, _collector(s.source, ctx), outcomes)
            if result is not None:
                results = results.with_data(s.name, result.data)
        peaks = {}
        if self.sampler is not None:
            peaks = {r.path: p for r in refs if (p := self.sampler.peak(r.path)) is not None}
        if self.postmortem is not None:
            # The OOM watcher's kills, joined like any source's data; not a collector of
            # its own (it reads nothing on the scrape and cannot fail).
            results = results.with_data(tally.KEY.name, self.postmortem.collect().data)
        snapshot = replace(join(refs, self.pods, results, peaks, outcomes),
                           degraded=DEGRADED.current())
        if self.postmortem is not None and d is not None:
            table = results.get(procfs.KEY)
            self.postmortem.observe(snapshot, table.processes if table is not None else {},
                                    [r.path for r in refs])
        return snapshot

    async def _discover(self) -> Result[Discovered]:
        return Result(await in_thread(self.discovery.discover))

    async def _guarded(self, name: str, collect: Callable[[], Awaitable[Result[T]]],
                       outcomes: list[CollectorResult]) -> Result[T] | None:
        """Run one source with a time limit; its failure, time-out or partial result is
        recorded (and logged once per distinct error), never raised."""
        guard = self._guards.setdefault(name, _Guard())
        start = time.perf_counter()
        if guard.running:
            # The earlier failure (a time-out) was logged; this is the same condition.
            self._fail(name, guard, guard.last_error or "still running from an earlier scrape",
                       start, outcomes)
            return None
        guard.running = True
        task = asyncio.ensure_future(collect())

        def done(_: object) -> None:
            guard.running = False

        task.add_done_callback(done)
        try:
            # Shielded: a worker thread cannot be stopped; the guard waits for it.
            result = await asyncio.wait_for(asyncio.shield(task), self.timeout)
        except asyncio.TimeoutError:
            self._fail(name, guard, f"timed out after {self.timeout:g}s", start, outcomes)
            return None
        except Exception as exc:
            self._fail(name, guard, f"{type(exc).__name__}: {exc}", start, outcomes)
            return None
        if result.errors:
            self._fail(name, guard, "; ".join(result.errors), start, outcomes)
            return result
        if guard.last_error:
            log.info("collector %s recovered", name)
            guard.last_error = ""
        outcomes.append(CollectorResult(name, True, time.perf_counter() - start))
        return result

    def _fail(self, name: str, guard: _Guard, error: str, start: float,
              outcomes: list[CollectorResult]) -> None:
        if error != guard.last_error:
            log.error("collector %s failed: %s", name, error)
        guard.last_error = error
        outcomes.append(CollectorResult(name, False, time.perf_counter() - start, error))
