"""The listening socket: a TCP site whose every connection passes the connection guard
(``connections.ConnectionGuard``) from accept, TLS included, and the runner around it."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from aiohttp import web

from exporter.web.app import GUARD_KEY, SECURITY_KEY
from exporter.web.connections import ConnectionGuard


class GuardedSite(web.TCPSite):
    """A TCP site whose connections pass through a ConnectionGuard, which admits each at
    accept and then runs the TLS handshake within its header timeout."""

    def __init__(self, runner: web.BaseRunner, host: str | None, port: int,
                 guard: ConnectionGuard, ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context, backlog=128)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner
        server: Any = self._runner.server
        assert server is not None
        # Plain TCP: the guard admits each connection first, then starts TLS itself.
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.wrap(server, self._ssl_context), self._host, self._port,
            backlog=self._backlog)


async def start_server(app: web.Application, host: str | None, port: int
                       ) -> tuple[web.AppRunner, GuardedSite]:
    """Runner and listening site. aiohttp's own keep-alive timer is set to the guard's
    idle timeout; at most 100 request headers (aiohttp's default is 128)."""
    guard = app[GUARD_KEY]
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=guard.idle_timeout,
                           max_headers=100, max_field_size=8190, max_line_size=8190)
    await runner.setup()
    site = GuardedSite(runner, host, port, guard, app[SECURITY_KEY].listener_ssl)
    await site.start()
    return runner, site

