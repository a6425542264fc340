"""Following vLLM's KV-event publishers: one ZMQ subscriber per endpoint feeding a
``KvBlockTracker`` (``kv_events.py``), and the hub that keeps them in step with discovery.
The wire format is described in ``kv_events.py``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import zmq
import zmq.asyncio

from exporter.collectors.vllm.discovery import KvEventEndpoint
from exporter.collectors.vllm.kv_events import (
    KvBlockTracker,
    Outcome,
    is_replay_end,
)

log = logging.getLogger("exporter.collectors.vllm.kv_events")


@dataclass
class KvEventSubscriber:
    """Follows one publisher (one DP rank) into a ``KvBlockTracker`` until cancelled.

    On start it asks the replay endpoint for everything still buffered (from 0), so a
    restarted exporter learns the blocks cached before it came up, as far as vLLM's buffer
    (buffer_steps batches) reaches. An unreachable endpoint is not an error: ZMQ keeps
    reconnecting and the tracker stays empty.
    """

    source: KvEventEndpoint
    tracker: KvBlockTracker = field(default_factory=KvBlockTracker)
    replay_timeout: float = 2.0
    ctx: zmq.asyncio.Context | None = None

    def __post_init__(self) -> None:
        if self.tracker.default_engine == "0":
            self.tracker.default_engine = str(self.source.dp_rank)

    def prefix_cache_blocks(self) -> dict[tuple[str, str], int]:
        return self.tracker.prefix_cache_blocks()

    async def run(self) -> None:
        ctx = self.ctx or zmq.asyncio.Context.instance()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 100_000)
        sub.connect(self.source.endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, self.source.topic.encode())
        try:
            if self.source.replay_endpoint:
                await self._replay(ctx, sub, 0)
            while True:
                frames = await sub.recv_multipart()
                outcome = self.tracker.apply_frames(frames)
                if outcome is Outcome.GAP:
                    if self.source.replay_endpoint:
                        await self._replay(ctx, sub, self.tracker.replay_from)
                    else:
                        self.tracker.replay_done()  # nothing to ask: accept the loss
                elif outcome is Outcome.RESET and self.tracker.last_seq and (
                    self.source.replay_endpoint
                ):
                    # restarted and we missed its first batches: fetch them from 0
                    self.tracker.clear()
                    await self._replay(ctx, sub, 0)
        finally:
            sub.close(linger=0)

    async def _replay(self, ctx: zmq.asyncio.Context, sub: zmq.asyncio.Socket, start: int) -> None:
        """Fetch buffered batches from ``start`` while holding live ones, then apply in order."""
        assert self.source.replay_endpoint is not None
        self.tracker.begin_replay()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.source.replay_endpoint)
        poller = zmq.asyncio.Poller()
        poller.register(sub, zmq.POLLIN)
        poller.register(dealer, zmq.POLLIN)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.replay_timeout
        try:
            await dealer.send_multipart([b"", start.to_bytes(8, "big", signed=True)])
            while (left := deadline - loop.time()) > 0:
                ready = dict(await poller.poll(timeout=left * 1000))
                if sub in ready:
                    self.tracker.apply_frames(await sub.recv_multipart())
                if dealer in ready:
                    frames = await dealer.recv_multipart()
                    if is_replay_end(frames):
                        break
                    self.tracker.apply_frames(frames, replay=True)
                    deadline = loop.time() + self.replay_timeout  # still streaming
            else:
                log.info("KV events: no replay answer from %s within %.1fs",
                         self.source.replay_endpoint, self.replay_timeout)
        finally:
            dealer.close(linger=0)
            self.tracker.replay_done()


@dataclass
class KvEventsHub:
    """One subscriber per KV-event endpoint of each vLLM instance, kept in step with discovery.

    ``key`` names a vLLM instance (e.g. its /metrics URL). Call ``ensure`` on each discovery
    pass with the endpoints seen (an empty tuple stops them); read ``prefix_cache_blocks``
    at scrape time. Must be used from one event loop.
    """

    replay_timeout: float = 2.0
    _subs: dict[str, dict[KvEventEndpoint, tuple[KvEventSubscriber, asyncio.Task[None]]]] = (
        field(default_factory=dict)
    )

    def ensure(self, key: str, endpoints: Sequence[KvEventEndpoint]) -> None:
        current = self._subs.setdefault(key, {})
        for ep in set(current) - set(endpoints):
            current.pop(ep)[1].cancel()
        for ep in endpoints:
            if ep not in current or current[ep][1].done():
                sub = KvEventSubscriber(ep, replay_timeout=self.replay_timeout)
                task = asyncio.create_task(sub.run(), name=f"kv-events {ep.endpoint}")
                task.add_done_callback(_log_task_end)
                current[ep] = (sub, task)
        if not current:
            del self._subs[key]

    def prefix_cache_blocks(self, key: str) -> dict[tuple[str, str], int]:
        """(engine, medium) -> live blocks over all endpoints of that instance."""
        out: dict[tuple[str, str], int] = {}
        for sub, _ in self._subs.get(key, {}).values():
            for k, n in sub.prefix_cache_blocks().items():
                out[k] = out.get(k, 0) + n
        return out

    def instances(self) -> list[str]:
        """The vLLM instances followed."""
        return sorted(self._subs)

    async def close(self) -> None:
        tasks = [t for subs in self._subs.values() for _, t in subs.values()]
        self._subs.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _log_task_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("KV events: %s stopped: %r", task.get_name(), task.exception())
