"""The vLLM source: read every local vLLM's /metrics on each scrape and follow its KV cache
events between scrapes. Its data is keyed by cgroup; ``join.py`` labels it."""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import aiohttp

from exporter.catalog import MEDIUM_CPU
from exporter.collectors import procfs
from exporter.collectors.vllm import metrics as vm
from exporter.collectors.vllm.kv_endpoints import (
    KvEventEndpoint,
    allowed_endpoints,
    base_url,
    fetch_kv_event_sources,
    kv_event_endpoints_from_argv,
)
from exporter.collectors.vllm.kv_subscriber import KvEventsHub
from exporter.collectors.vllm.locate import (
    MAX_PROBES,
    Candidate,
    LocatedServer,
    VllmTarget,
    explicit_targets,
    find_servers,
    looks_like_vllm,
)
from exporter.collectors.vllm.offload import offload_region_bytes
from exporter.collectors.vllm.reading import ByteBudget, Reservation, VllmScrapeError, fetch_text
from exporter.contract.settings import (
    Settings,
    parse_duration,
    parse_size,
    positive,
    repeated,
    setting,
)
from exporter.contract.source import Context, Key, Result, SourceBase, SourceSpec
from exporter.host.paths import HostPaths, read_bytes

log = logging.getLogger(__name__)

KV_SOURCES_RETRY = 60.0  # seconds before asking a vLLM for its KV-event endpoints again
MAX_KV_ENDPOINTS = 8  # KV-event publishers followed per vLLM instance (DP ranks)


@dataclass(frozen=True)
class VllmSettings(Settings):
    endpoints: tuple[str, ...] = repeated(
        "--vllm.endpoint", str,
        "a vLLM /metrics URL to scrape in addition to the discovered ones (repeatable)")
    timeout: float = setting("--vllm.timeout", "2s", parse_duration,
                             "deadline of all vLLM /metrics reads and probes of one "
                             "scrape, run at once (keep it below --collector.timeout)",
                             check=positive)
    max_body_bytes: int = setting("--vllm.max-body-bytes", "8MiB", parse_size,
                                  "largest vLLM /metrics body read; also what the reads of "
                                  "one pod may hold at once")
    max_scrape_bytes: int = setting("--vllm.max-scrape-bytes", "32MiB", parse_size,
                                    "what all vLLM reads of one scrape may hold at once")
    kv_events: bool = True  # follow KV cache events (not a flag; tests turn it off)


@dataclass(frozen=True)
class VllmReading:
    target: VllmTarget
    stats: vm.VllmStats | None  # None: the read failed
    # (engine, medium) -> live prefix-cache blocks, from KV events: exact counts only
    # (empty when events are off, not followed, or the count is not known)
    prefix_blocks: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # (engine, medium) -> whether that count is known (False: disconnected, events lost)
    kv_synced: Mapping[tuple[str, str], bool] = field(default_factory=dict)
    # (engine, reason) -> KV events lost since the exporter started
    kv_lost: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class VllmData:
    readings: tuple[VllmReading, ...]


KEY: Key[VllmData] = Key("vllm")

NOT_VLLM_TTL = 300.0  # seconds a port that answered without vLLM series is not probed again
# A port that timed out or failed is left alone for 30 s, doubling per failure up to 10 min.
FAIL_BACKOFF, FAIL_BACKOFF_MAX = 30.0, 600.0
MAX_SERVERS_PER_POD = 4  # vLLM API servers read per pod (more is an attack, not a vLLM)
MAX_PROBES_PER_POD = 8  # ports probed per pod per scrape, over all its API servers


@dataclass
class Backoff:
    until: float
    failures: int = 0


class Probe(enum.Enum):
    VLLM = "vllm"
    NOT_VLLM = "not vllm"  # answered, without vLLM families
    FAILED = "failed"  # timed out, refused, HTTP error, too large


def backoff_after(outcome: Probe, before: Backoff | None, now: float) -> Backoff | None:
    """When a port may be probed again (None: it answered as a vLLM)."""
    if outcome is Probe.VLLM:
        return None
    if outcome is Probe.NOT_VLLM:
        return Backoff(now + NOT_VLLM_TTL)
    failures = (before.failures if before else 0) + 1
    return Backoff(now + min(FAIL_BACKOFF * 2 ** (failures - 1), FAIL_BACKOFF_MAX), failures)


def cap_per_pod(servers: Sequence[LocatedServer], most: int = MAX_SERVERS_PER_POD
                ) -> tuple[list[LocatedServer], list[str]]:
    """At most ``most`` API servers per pod (the oldest pids); the rest as error lines."""
    kept: list[LocatedServer] = []
    per_pod: dict[str, int] = {}
    left: dict[str, int] = {}
    for s in sorted(servers, key=lambda s: (s.pod, s.pid)):
        if per_pod.get(s.pod, 0) < most:
            per_pod[s.pod] = per_pod.get(s.pod, 0) + 1
            kept.append(s)
        else:
            left[s.pod] = left.get(s.pod, 0) + 1
    return kept, [f"{pod}: {n} vLLM API servers beyond {most} per pod left out"
                  for pod, n in sorted(left.items())]


@dataclass
class ScrapeBudgets:
    """The byte budgets of one scrape: all reads together, and each pod's reads."""

    scrape: ByteBudget
    pod_bytes: int
    pods: dict[str, ByteBudget] = field(default_factory=dict)
    probes_left: dict[str, int] = field(default_factory=dict)

    def reservation(self, pod: str | None) -> Reservation:
        if pod is None:  # an explicit --vllm.endpoint: the operator's, no pod budget
            return Reservation((self.scrape,))
        budget = self.pods.setdefault(pod, ByteBudget(self.pod_bytes))
        return Reservation((self.scrape, budget))

    def probes(self, pod: str, wanted: int) -> int:
        """How many of ``wanted`` probes that pod may still make this scrape."""
        room = self.probes_left.setdefault(pod, MAX_PROBES_PER_POD)
        granted = min(room, wanted)
        self.probes_left[pod] = room - granted
        return granted


class VllmSource(SourceBase):
    def __init__(self, settings: VllmSettings, paths: HostPaths) -> None:
        self._settings = settings
        self._paths = paths
        self._session: aiohttp.ClientSession | None = None
        self._hub = KvEventsHub() if settings.kv_events else None
        self._kv_asked: dict[str, float] = {}  # instance key -> when endpoints were asked
        # (cgroup, pid) -> the listener that answered with vLLM series
        self._chosen: dict[tuple[str, int], Candidate] = {}
        self._backoff: dict[tuple[int, int], Backoff] = {}  # (pid, port) -> not before
        self._kv_lookups: dict[str, asyncio.Task[tuple[KvEventEndpoint, ...]]] = {}

    async def collect(self, ctx: Context) -> Result[VllmData]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        st = self._settings
        found, errors = find_servers(ctx.refs, ctx.get(procfs.KEY), ctx.pods,
                                          self._paths)
        servers, capped = cap_per_pod(found)
        errors += capped
        explicit = explicit_targets(st.endpoints)
        budgets = ScrapeBudgets(ByteBudget(st.max_scrape_bytes), st.max_body_bytes)
        # every read and probe at once, under one deadline: a server that hangs costs
        # its own series, not the others'
        deadline = asyncio.get_running_loop().time() + st.timeout
        scraped = await asyncio.gather(
            *(self._read_server(s, budgets, deadline) for s in servers),
            *(self._scrape(t, budgets.reservation(None), deadline) for t in explicit))
        readings = [r for r, _ in scraped]
        errors += [e for _, e in scraped if e]
        errors += [f"{r.target.shown or r.target.cgroup}: {r.stats.dropped} model/engine pairs "
                   f"beyond {vm.MAX_ENGINES} left out" for r in readings
                   if r.stats is not None and r.stats.dropped]
        self._forget({(s.cgroup, s.pid) for s in found})
        if self._hub is not None:
            readings, kv_errors = self._follow_kv_events(self._hub, readings)
            errors += kv_errors
        if errors:
            errors = [f"{len(errors)} vLLM unreadable, first: {errors[0]}"]
        return Result(VllmData(tuple(readings)), tuple(errors))

    async def _read_server(self, s: LocatedServer, budgets: ScrapeBudgets, deadline: float
                           ) -> tuple[VllmReading, str]:
        """The server's /metrics: the listener that answered before, else a probe of its
        reachable listeners at once (not backed off, within the pod's probe budget); the
        likeliest one that answers with vLLM series wins."""
        key = (s.cgroup, s.pid)
        chosen = self._chosen.get(key)
        if chosen is not None and chosen in s.candidates:
            reading, error = await self._scrape(s.target(chosen), budgets.reservation(s.pod),
                                                deadline)
            if reading.stats is None:
                self._chosen.pop(key, None)  # probe again on the next pass
            return reading, error
        now = time.monotonic()
        todo = [c for c in s.candidates
                if (b := self._backoff.get((s.pid, c.port))) is None or b.until <= now]
        todo = todo[:budgets.probes(s.pod, min(len(todo), MAX_PROBES))]
        tried = ", ".join(c.hostport for c in todo) or "no reachable listening TCP socket"
        probes = {c: asyncio.ensure_future(self._probe(s.target(c), budgets, s.pod, deadline))
                  for c in todo}
        try:
            for c in todo:  # the likeliest first: wait for it before a later one wins
                outcome, text, held = await probes[c]
                b = backoff_after(outcome, self._backoff.get((s.pid, c.port)), time.monotonic())
                if b is None:
                    self._backoff.pop((s.pid, c.port), None)
                    self._chosen[key] = c
                    return self._parsed(s.target(c), text, held)
                self._backoff[(s.pid, c.port)] = b
        finally:
            for task in probes.values():
                task.cancel()
            for task in probes.values():
                if task.done() and not task.cancelled() and task.exception() is None:
                    task.result()[2].release()
        return (VllmReading(VllmTarget(s.cgroup, "", "", s.argv, s.ports, s.pid), None),
                f"{s.cgroup}: vLLM API server {s.pid} serves no vLLM /metrics ({tried})")

    async def _probe(self, t: VllmTarget, budgets: ScrapeBudgets, pod: str,
                     deadline: float) -> tuple[Probe, str, Reservation]:
        held = budgets.reservation(pod)
        try:
            text = await self._fetch(t, held, deadline)
        except VllmScrapeError:
            held.release()
            return Probe.FAILED, "", held
        except BaseException:  # cancelled: another port won
            held.release()
            raise
        if not looks_like_vllm(text):
            held.release()
            return Probe.NOT_VLLM, "", held
        return Probe.VLLM, text, held

    def _parsed(self, t: VllmTarget, text: str, held: Reservation
                ) -> tuple[VllmReading, str]:
        try:
            stats = vm.parse_vllm_metrics(text)
        except vm.VllmParseError as exc:
            return VllmReading(t, None), f"{t.shown}: {exc}"
        finally:
            held.release()
        return VllmReading(t, self._real_cpu_tier(t, stats)), ""

    async def _fetch(self, t: VllmTarget, held: Reservation, deadline: float) -> str:
        assert self._session is not None
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise VllmScrapeError(f"GET {t.shown}: no time left in this scrape")
        return await fetch_text(self._session, t.url, timeout=left,
                                   max_bytes=self._settings.max_body_bytes, reservation=held,
                                   filter_lines=True)

    async def _scrape(self, t: VllmTarget, held: Reservation, deadline: float
                      ) -> tuple[VllmReading, str]:
        try:
            text = await self._fetch(t, held, deadline)
        except VllmScrapeError as exc:
            held.release()
            return VllmReading(t, None), str(exc)
        return self._parsed(t, text, held)

    def _real_cpu_tier(self, t: VllmTarget, stats: vm.VllmStats) -> vm.VllmStats:
        """The CPU tier's capacity in bytes as the host pays for it: the size of the
        offload region its engine processes map, when there is one and one engine has a
        CPU tier (the configured size otherwise)."""
        tiers = [e for e in stats.engines if MEDIUM_CPU in e.capacity]
        if len(tiers) != 1 or not t.engines:
            return stats
        procfs_dir = str(self._paths.procfs)
        real = offload_region_bytes(t.engines[:64],
                                    lambda pid: read_bytes(f"{procfs_dir}/{pid}/maps"))
        if not real:
            return stats
        e = tiers[0]
        cap = replace(e.capacity[MEDIUM_CPU], bytes=real, source="offload region in /dev/shm")
        engines = tuple(replace(x, capacity={**x.capacity, MEDIUM_CPU: cap}) if x is e else x
                        for x in stats.engines)
        return replace(stats, engines=engines)

    def _forget(self, live: set[tuple[str, int]]) -> None:
        for key in [k for k in self._chosen if k not in live]:
            del self._chosen[key]
        pids = {pid for _, pid in live}
        for k in [k for k in self._backoff if k[0] not in pids]:
            del self._backoff[k]  # kept while the process lives: failures keep doubling

    def _follow_kv_events(self, hub: KvEventsHub, readings: Sequence[VllmReading]
                          ) -> tuple[list[VllmReading], list[str]]:
        live = {r.target.key for r in readings if r.stats is not None}
        for key in hub.instances():
            if key not in live:
                # gone, or down (restarting at the same address): the blocks it held are
                # gone with it; follow the new engine from scratch once it is back
                hub.ensure(key, ())
                self._kv_asked.pop(key, None)
        for key in [k for k in self._kv_lookups if k not in live]:
            self._kv_lookups.pop(key).cancel()
        now = time.monotonic()
        out = []
        errors: list[str] = []
        for r in readings:
            key = r.target.key
            if r.stats is not None and key not in hub.instances():
                self._look_up_kv_events(hub, r, now)
            elif r.stats is not None:
                hub.ensure(key, hub.endpoints(key), capacity_blocks(r.stats))
            if r.stats is not None and key in hub.instances():
                state = hub.state(key)
                errors += list(state.problems)
                r = VllmReading(r.target, r.stats, state.prefix_blocks, state.synced,
                                {(e, reason.value): n for (e, reason), n in state.lost.items()})
            out.append(r)
        return out, errors

    def _look_up_kv_events(self, hub: KvEventsHub, r: VllmReading, now: float) -> None:
        """Ask a vLLM where it publishes KV events, off the scrape path: the answer is
        taken up by the first scrape after it came (a slow vLLM delays nobody)."""
        key = r.target.key
        task = self._kv_lookups.get(key)
        if task is None:
            if now - self._kv_asked.get(key, -1e9) >= KV_SOURCES_RETRY:
                self._kv_asked[key] = now
                self._kv_lookups[key] = asyncio.ensure_future(self._kv_endpoints(r.target))
            return
        if not task.done():
            return
        del self._kv_lookups[key]
        endpoints = allowed_endpoints(task.result(), r.target.ports)[:MAX_KV_ENDPOINTS]
        if endpoints and r.stats is not None:
            log.info("following KV cache events of %s at %s", r.target.shown,
                     ", ".join(e.endpoint for e in endpoints))
            hub.ensure(key, endpoints, capacity_blocks(r.stats))

    async def _kv_endpoints(self, t: VllmTarget) -> tuple[KvEventEndpoint, ...]:
        assert self._session is not None
        endpoints: tuple[KvEventEndpoint, ...] = ()
        try:
            endpoints = await fetch_kv_event_sources(
                self._session, base_url(t.url), t.host, timeout=self._settings.timeout)
        except Exception as exc:  # older vLLM: no such route; try its flags
            log.debug("GET /kv_event_sources of %s: %s", t.shown, str(exc)[:200])
        if not endpoints and t.argv:
            endpoints = kv_event_endpoints_from_argv(t.argv, t.host)
        return endpoints

    async def aclose(self) -> None:
        for task in self._kv_lookups.values():
            task.cancel()
        if self._hub is not None:
            await self._hub.close()
        if self._session is not None:
            await self._session.close()


def capacity_blocks(stats: vm.VllmStats) -> int | None:
    """What the engines can hold, all media: the KV trackers' bound (not a fixed default)."""
    total = sum(c.blocks or 0 for e in stats.engines for c in e.capacity.values())
    return total or None


SPEC = SourceSpec(KEY, "each local vLLM's /metrics and KV cache events", VllmSettings,
                  VllmSource, needs_cgroups=False)
