"""The vLLM source: read every local vLLM's /metrics on each scrape and follow its KV cache
events between scrapes. Its data is keyed by cgroup; ``join.py`` labels it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import aiohttp

from exporter.catalog import MEDIUM_CPU
from exporter.collectors import procfs
from exporter.collectors.vllm import discovery as disc
from exporter.collectors.vllm import metrics as vm
from exporter.collectors.vllm.kv_subscriber import KvEventsHub
from exporter.collectors.vllm.locate import MAX_PROBES, Candidate, looks_like_vllm
from exporter.collectors.vllm.offload import offload_region_bytes
from exporter.paths import HostPaths, read_bytes
from exporter.settings import Settings, parse_duration, parse_size, positive, repeated, setting
from exporter.source import Context, Key, Result, SourceBase, SourceSpec

log = logging.getLogger(__name__)

KV_SOURCES_RETRY = 60.0  # seconds before asking a vLLM for its KV-event endpoints again


@dataclass(frozen=True)
class VllmSettings(Settings):
    endpoints: tuple[str, ...] = repeated(
        "--vllm.endpoint", str,
        "a vLLM /metrics URL to scrape in addition to the discovered ones (repeatable)")
    timeout: float = setting("--vllm.timeout", "2s", parse_duration,
                             "time limit of one vLLM /metrics read", check=positive)
    max_body_bytes: int = setting("--vllm.max-body-bytes", "8MiB", parse_size,
                                  "largest vLLM /metrics body read")
    kv_events: bool = True  # follow KV cache events (not a flag; tests turn it off)


@dataclass(frozen=True)
class VllmReading:
    target: disc.VllmTarget
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


class VllmSource(SourceBase):
    def __init__(self, settings: VllmSettings, paths: HostPaths) -> None:
        self._settings = settings
        self._paths = paths
        self._session: aiohttp.ClientSession | None = None
        self._hub = KvEventsHub() if settings.kv_events else None
        self._kv_asked: dict[str, float] = {}  # instance key -> when endpoints were asked
        # (cgroup, pid) -> the listener that answered with vLLM series
        self._chosen: dict[tuple[str, int], Candidate] = {}
        self._not_vllm: dict[tuple[int, int], float] = {}  # (pid, port) -> until when

    async def collect(self, ctx: Context) -> Result[VllmData]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        servers, errors = disc.find_servers(ctx.refs, ctx.get(procfs.KEY), ctx.pods,
                                            self._paths)
        explicit = disc.explicit_targets(self._settings.endpoints)
        scraped = await asyncio.gather(*(self._read_server(s) for s in servers),
                                       *(self._scrape(t) for t in explicit))
        readings = [r for r, _ in scraped]
        errors += [e for _, e in scraped if e]
        errors += [f"{r.target.shown or r.target.cgroup}: {r.stats.dropped} model/engine pairs "
                   f"beyond {vm.MAX_ENGINES} left out" for r in readings
                   if r.stats is not None and r.stats.dropped]
        self._forget({(s.cgroup, s.pid) for s in servers})
        if self._hub is not None:
            readings, kv_errors = await self._follow_kv_events(self._hub, readings)
            errors += kv_errors
        if errors:
            errors = [f"{len(errors)} vLLM unreadable, first: {errors[0]}"]
        return Result(VllmData(tuple(readings)), tuple(errors))

    async def _read_server(self, s: disc.VllmServer) -> tuple[VllmReading, str]:
        """The server's /metrics: the listener that answered before, else a probe of its
        reachable listeners, the likeliest first, until one answers with vLLM series."""
        key = (s.cgroup, s.pid)
        chosen = self._chosen.get(key)
        if chosen is not None and chosen in s.candidates:
            reading, error = await self._scrape(s.target(chosen))
            if reading.stats is None:
                self._chosen.pop(key, None)  # probe again on the next pass
            return reading, error
        now = time.monotonic()
        tried: list[str] = []
        for c in s.candidates:
            if len(tried) >= MAX_PROBES:
                break
            if self._not_vllm.get((s.pid, c.port), 0.0) > now:
                continue
            tried.append(c.hostport)
            t = s.target(c)
            try:
                text = await self._fetch(t)
            except vm.VllmScrapeError:
                continue
            if not looks_like_vllm(text):
                self._not_vllm[(s.pid, c.port)] = now + NOT_VLLM_TTL
                continue
            self._chosen[key] = c
            try:
                stats = vm.parse_vllm_metrics(text)
            except vm.VllmParseError as exc:
                return VllmReading(t, None), f"{t.shown}: {exc}"
            return VllmReading(t, self._real_cpu_tier(t, stats)), ""
        where = ", ".join(tried) if tried else "no reachable listening TCP socket"
        return (VllmReading(disc.VllmTarget(s.cgroup, "", "", s.argv, s.ports, s.pid), None),
                f"{s.cgroup}: vLLM API server {s.pid} serves no vLLM /metrics ({where})")

    async def _fetch(self, t: disc.VllmTarget) -> str:
        assert self._session is not None
        st = self._settings
        return await vm.fetch_text(self._session, t.url, timeout=st.timeout,
                                   max_bytes=st.max_body_bytes)

    async def _scrape(self, t: disc.VllmTarget) -> tuple[VllmReading, str]:
        try:
            stats = vm.parse_vllm_metrics(await self._fetch(t))
        except vm.VllmScrapeError as exc:
            return VllmReading(t, None), str(exc)
        except vm.VllmParseError as exc:
            return VllmReading(t, None), f"{t.shown}: {exc}"
        return VllmReading(t, self._real_cpu_tier(t, stats)), ""

    def _real_cpu_tier(self, t: disc.VllmTarget, stats: vm.VllmStats) -> vm.VllmStats:
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
        now = time.monotonic()
        for k in [k for k, until in self._not_vllm.items() if until <= now]:
            del self._not_vllm[k]

    async def _follow_kv_events(self, hub: KvEventsHub, readings: Sequence[VllmReading]
                                ) -> tuple[list[VllmReading], list[str]]:
        live = {r.target.key for r in readings if r.stats is not None}
        for key in hub.instances():
            if key not in live:
                # gone, or down (restarting at the same address): the blocks it held are
                # gone with it; follow the new engine from scratch once it is back
                hub.ensure(key, ())
                self._kv_asked.pop(key, None)
        now = time.monotonic()
        out = []
        errors: list[str] = []
        for r in readings:
            key = r.target.key
            if r.stats is not None and key not in hub.instances() and (
                    now - self._kv_asked.get(key, -1e9) >= KV_SOURCES_RETRY):
                self._kv_asked[key] = now
                endpoints = disc.allowed_endpoints(await self._kv_endpoints(r.target),
                                                   r.target.ports)
                if endpoints:
                    log.info("following KV cache events of %s at %s", r.target.shown,
                             ", ".join(e.endpoint for e in endpoints))
                    hub.ensure(key, endpoints, capacity_blocks(r.stats))
            elif r.stats is not None and key in hub.instances():
                hub.ensure(key, hub.endpoints(key), capacity_blocks(r.stats))
            if r.stats is not None and key in hub.instances():
                state = hub.state(key)
                errors += list(state.problems)
                r = VllmReading(r.target, r.stats, state.prefix_blocks, state.synced,
                                {(e, reason.value): n for (e, reason), n in state.lost.items()})
            out.append(r)
        return out, errors

    async def _kv_endpoints(self, t: disc.VllmTarget) -> tuple[disc.KvEventEndpoint, ...]:
        assert self._session is not None
        endpoints: tuple[disc.KvEventEndpoint, ...] = ()
        try:
            endpoints = await disc.fetch_kv_event_sources(
                self._session, disc.base_url(t.url), t.host, timeout=self._settings.timeout)
        except Exception as exc:  # older vLLM: no such route; try its flags
            log.debug("GET /kv_event_sources of %s: %s", t.shown, str(exc)[:200])
        if not endpoints and t.argv:
            endpoints = disc.kv_event_endpoints_from_argv(t.argv, t.host)
        return endpoints

    async def aclose(self) -> None:
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
