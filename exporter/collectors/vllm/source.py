"""The vLLM source: read every local vLLM's /metrics on each scrape and follow its KV cache
events between scrapes. Its data is keyed by cgroup; ``join.py`` labels it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from exporter.collectors import procfs
from exporter.collectors.vllm import discovery as disc
from exporter.collectors.vllm import metrics as vm
from exporter.collectors.vllm.kv_events import KvEventsHub
from exporter.paths import HostPaths
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
    # (engine, medium) -> live prefix-cache blocks, from KV events (empty when off)
    prefix_blocks: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class VllmData:
    readings: tuple[VllmReading, ...]


KEY: Key[VllmData] = Key("vllm")


class VllmSource(SourceBase):
    def __init__(self, settings: VllmSettings, paths: HostPaths) -> None:
        self._settings = settings
        self._paths = paths
        self._session: aiohttp.ClientSession | None = None
        self._hub = KvEventsHub() if settings.kv_events else None
        self._kv_asked: dict[str, float] = {}  # url -> when endpoints were last looked up

    async def collect(self, ctx: Context) -> Result[VllmData]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        targets, errors = disc.find_targets(ctx.refs, ctx.get(procfs.KEY), ctx.pods,
                                            self._paths, self._settings.endpoints)
        scraped = await asyncio.gather(*(self._scrape(t) for t in targets))
        readings = [r for r, _ in scraped]
        errors += [e for _, e in scraped if e]
        if self._hub is not None:
            readings = await self._follow_kv_events(self._hub, readings)
        if errors:
            errors = [f"{len(errors)} vLLM unreadable, first: {errors[0]}"]
        return Result(VllmData(tuple(readings)), tuple(errors))

    async def _scrape(self, t: disc.VllmTarget) -> tuple[VllmReading, str]:
        assert self._session is not None
        s = self._settings
        try:
            stats = await vm.scrape_vllm(self._session, t.url, timeout=s.timeout,
                                         max_bytes=s.max_body_bytes)
        except vm.VllmScrapeError as exc:
            return VllmReading(t, None), str(exc)
        except vm.VllmParseError as exc:
            return VllmReading(t, None), f"{t.url}: {exc}"
        return VllmReading(t, stats), ""

    async def _follow_kv_events(self, hub: KvEventsHub,
                                readings: Sequence[VllmReading]) -> list[VllmReading]:
        live = {r.target.url for r in readings}
        followed = hub.instances()
        for key in followed:
            if key not in live:
                hub.ensure(key, ())  # that vLLM is gone: stop listening
                self._kv_asked.pop(key, None)
        now = time.monotonic()
        out = []
        for r in readings:
            url = r.target.url
            if r.stats is None:
                if url in hub.instances():
                    # Down (or restarting at the same address): the blocks it held are
                    # gone with it; follow the new engine from scratch once it is back.
                    hub.ensure(url, ())
                    self._kv_asked.pop(url, None)
            elif url not in hub.instances() and now - self._kv_asked.get(url, -1e9) >= (
                    KV_SOURCES_RETRY):
                self._kv_asked[url] = now
                endpoints = await self._kv_endpoints(r.target)
                if endpoints:
                    log.info("following KV cache events of %s at %s", url,
                             ", ".join(e.endpoint for e in endpoints))
                    hub.ensure(url, endpoints)
            if r.stats is not None and url in hub.instances():
                r = VllmReading(r.target, r.stats, hub.prefix_cache_blocks(url))
            out.append(r)
        return out

    async def _kv_endpoints(self, t: disc.VllmTarget) -> tuple[disc.KvEventEndpoint, ...]:
        assert self._session is not None
        endpoints: tuple[disc.KvEventEndpoint, ...] = ()
        try:
            endpoints = await disc.fetch_kv_event_sources(
                self._session, disc.base_url(t.url), t.host, timeout=self._settings.timeout)
        except Exception as exc:  # older vLLM: no such route; try its flags
            log.debug("GET /kv_event_sources of %s: %s", t.url, exc)
        if not endpoints and t.argv:
            endpoints = disc.kv_event_endpoints_from_argv(t.argv, t.host)
        return endpoints

    async def aclose(self) -> None:
        if self._hub is not None:
            await self._hub.close()
        if self._session is not None:
            await self._session.close()


SPEC = SourceSpec(KEY, "each local vLLM's /metrics and KV cache events", VllmSettings,
                  VllmSource)
