"""Bounded HTTP connections: a cap, a header timeout, an idle timeout, a request timeout.

Anyone who can reach the port can open connections; each costs a file descriptor, and a
node agent at a 1,024-fd limit that lets 1,000 idle sockets in can no longer open /proc
nor accept Prometheus. So every connection is tracked from accept:

- a connection that has not sent a whole request head within ``header_timeout`` is closed
  (slowloris, port scanners, clients that never send);
- between requests a keep-alive connection may wait ``idle_timeout`` (longer than a scrape
  interval, so Prometheus keeps its connection);
- a request that takes longer than ``request_timeout`` (a client that stops reading a
  large response) is aborted;
- at ``max_connections`` a new connection evicts the longest-idle one that is not in a
  request; only when every connection is busy is the new one refused. A flood of idle
  sockets therefore cannot lock Prometheus out: it always displaces an idle attacker.

aiohttp's protocol objects are wrapped, not subclassed: the wrapper sees accept and close;
the request middleware (``middleware``) marks request start and end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)


def default_max_connections(cap: int = 256) -> int:
    """A quarter of the open-file soft limit, at most ``cap``: the rest stays for /proc
    and cgroup files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return cap
    return max(8, min(cap, soft // 4))


@dataclass
class _Conn:
    transport: asyncio.BaseTransport
    since: float  # when the current state (waiting or busy) began
    busy: int = 0
    served: int = 0


@dataclass
class ConnectionStats:
    evicted: int = 0
    refused: int = 0


class ConnectionGuard:
    def __init__(self, max_connections: int | None = None, header_timeout: float = 10.0,
                 idle_timeout: float = 90.0, request_timeout: float = 120.0,
                 clock: Callable[[], float] | None = None) -> None:
        self.max_connections = max_connections or default_max_connections()
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self._clock = clock
        self._conns: dict[int, _Conn] = {}  # id(transport) -> state
        self._aliases: dict[int, int] = {}  # id(raw transport) -> id(its TLS transport)
        self.stats = ConnectionStats()

    def now(self) -> float:
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    def __len__(self) -> int:
        return len(self._conns) - len(self._aliases)

    def _unique(self) -> list[_Conn]:
        return list({id(c): c for c in self._conns.values()}.values())

    # --- accept and close (the protocol wrapper) ---------------------------------------

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        now = self.now()
        if len(self) >= self.max_connections:
            idle = [c for c in self._unique() if not c.busy]
            if not idle:
                self.stats.refused += 1
                return False
            victim = min(idle, key=lambda c: c.since)
            self.stats.evicted += 1
            self._drop(victim.transport)
        self._conns[id(transport)] = _Conn(transport, now)
        return True

    def release(self, transport: asyncio.BaseTransport) -> None:
        self._conns.pop(id(transport), None)
        alias = self._aliases.pop(id(transport), None)
        if alias is not None:
            self._conns.pop(alias, None)

    def _drop(self, transport: asyncio.BaseTransport) -> None:
        self.release(transport)
        with contextlib.suppress(Exception):
            transport.abort()  # type: ignore[attr-defined]

    # --- requests (the middleware) -----------------------------------------------------

    def begin(self, transport: asyncio.BaseTransport | None) -> None:
        c = self._conns.get(id(transport)) if transport is not None else None
        if c is not None:
            if not c.busy:
                c.since = self.now()
            c.busy += 1

    def end(self, transport: asyncio.BaseTransport | None) -> None:
        c = self._conns.get(id(transport)) if transport is not None else None
        if c is not None:
            c.busy = max(0, c.busy - 1)
            c.served += 1
            if not c.busy:
                c.since = self.now()

    # --- timeouts ----------------------------------------------------------------------

    def sweep(self) -> int:
        """Close every connection past its deadline; returns how many."""
        now = self.now()
        late = []
        for c in self._unique():
            if c.busy:
                limit = self.request_timeout
            else:
                limit = self.idle_timeout if c.served else self.header_timeout
            if now - c.since > limit:
                late.append(c.transport)
        for t in late:
            self._drop(t)
        return len(late)

    async def run(self, period: float = 1.0) -> None:
        while True:
            await asyncio.sleep(period)
            self.sweep()

    def wrap(self, factory: Callable[[], asyncio.BaseProtocol],
             tls: ssl.SSLContext | None = None) -> Callable[[], asyncio.Protocol]:
        return lambda: _GuardedProtocol(self, factory(), tls)

    def alias(self, tls: asyncio.BaseTransport, raw: asyncio.BaseTransport) -> None:
        """Requests arrive on the TLS transport; the state is the raw connection's."""
        c = self._conns.get(id(raw))
        if c is not None:
            self._conns[id(tls)] = c
            self._aliases[id(raw)] = id(tls)

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:
        transport = request.transport
        self.begin(transport)
        try:
            return await handler(request)
        finally:
            self.end(transport)


class _GuardedProtocol(asyncio.Protocol):
    """Forwards every protocol call to aiohttp's handler; admits at TCP accept.

    With TLS the listener is plain TCP and the handshake is started here
    (``loop.start_tls``) after admission: asyncio's own TLS server creates the protocol
    only after the handshake, so connections that never send a ClientHello would hold
    descriptors outside any cap until the handshake timeout."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.BaseProtocol,
                 tls: ssl.SSLContext | None = None) -> None:
        self._guard = guard
        self._inner: Any = inner
        self._tls = tls
        self._raw: asyncio.BaseTransport | None = None
        self._transport: asyncio.BaseTransport | None = None  # what aiohttp sees
        self._handshake: asyncio.Task[None] | None = None
        self._early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._guard.admit(transport):
            transport.abort()  # type: ignore[attr-defined]
            return
        self._raw = transport
        if self._tls is None:
            self._transport = transport
            self._inner.connection_made(transport)
        else:
            # No byte may reach this protocol before start_tls hands the socket to TLS.
            transport.pause_reading()  # type: ignore[attr-defined]
            self._handshake = asyncio.ensure_future(self._start_tls(transport, self._tls))

    async def _start_tls(self, raw: asyncio.BaseTransport, ctx: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(raw, self, ctx, server_side=True,  # type: ignore[arg-type]
                                       ssl_handshake_timeout=self._guard.header_timeout)
        except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError):
            raw.abort()  # type: ignore[attr-defined]
            return
        if tls is None or raw.is_closing():
            return
        self._guard.alias(tls, raw)
        self._transport = tls
        self._inner.connection_made(tls)
        early, self._early = self._early, []
        for data in early:  # the request that came with the end of the handshake
            self._inner.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._raw is None:
            return  # refused at accept: aiohttp never saw it
        self._guard.release(self._raw)
        if self._handshake is not None and not self._handshake.done():
            self._handshake.cancel()
        if self._transport is not None:
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._inner.data_received(data)
        elif self._handshake is not None and sum(map(len, self._early)) < 65536:
            # Decrypted bytes can arrive between the handshake's end and this protocol
            # learning of it (start_tls resumes us a loop iteration later).
            self._early.append(data)

    def eof_received(self) -> bool | None:
        if self._transport is None:
            return None
        result: bool | None = self._inner.eof_received()
        return result

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._inner.resume_writing()
