"""The aiohttp application: /metrics, /healthz, /debug/oom/ and a landing page.

Hardened for a port anyone on the node network can reach: connections are bounded
(``connections.ConnectionGuard``), ``--web.config.file`` adds TLS, basic auth, response
headers and a rate limit (exporter-toolkit's format, ``webconfig``), and concurrent
scrapes of one collection share one rendering (red-team finding F8: 150 concurrent
scrapes each rendered in the shared thread pool, and the collectors queued behind them
timed out, so a scrape in the burst came back without workload series).
"""

from __future__ import annotations

import asyncio
import html
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from exporter import __version__
from exporter.connections import ConnectionGuard
from exporter.encode import encode
from exporter.factory import Exporter
from exporter.oncall.postmortem_page import render_document, wants_html
from exporter.oom.documents import DocumentStore
from exporter.oomindex import IndexCache
from exporter.render import render
from exporter.webconfig import (
    BasicAuth,
    TokenBucket,
    WebConfig,
    WebConfigError,
    load_web_config,
    peer_sans,
    ssl_context,
)
from exporter.workpool import BoundedPool, Busy

log = logging.getLogger(__name__)

EXPORTER_KEY = web.AppKey("exporter", Exporter)


class Security:
    """The web config in force, swapped whole on SIGHUP (a bad file keeps the old one).

    TLS stays on or off as started (the listener is made once), and the parameters of a
    handshake other than the certificate, key and client CA (versions, ciphers, client
    auth type) apply from the next start: each handshake picks up the newest context
    through the SNI callback, which OpenSSL calls for every ClientHello."""

    def __init__(self, path: Path | None, config: WebConfig | None = None) -> None:
        self.path = path
        self.config = config or WebConfig()
        self._reloading: asyncio.Future[None] | None = None
        self._again = False
        self._apply(self.config)
        # The listener's context, fixed at start; handshakes switch to the newest one.
        self.listener_ssl: ssl.SSLContext | None = self.ssl
        if self.listener_ssl is not None:
            self.listener_ssl.sni_callback = self._pick_context

    @classmethod
    def load(cls, path: Path | None) -> Security:
        """Raises WebConfigError naming every problem of the file."""
        return cls(path, load_web_config(path) if path is not None else None)

    def _apply(self, cfg: WebConfig) -> None:
        self.config = cfg
        self.auth = BasicAuth(cfg.users, previous=getattr(self, "auth", None))
        self.limiter = TokenBucket(cfg.rate_interval, cfg.rate_burst) \
            if cfg.rate_interval > 0 else None
        self.ssl = ssl_context(cfg.tls) if cfg.tls is not None else None

    def _pick_context(self, sslobj: ssl.SSLObject, name: str | None,
                      ctx: ssl.SSLContext) -> None:
        if self.ssl is not None and sslobj.context is not self.ssl:
            sslobj.context = self.ssl

    def request_reload(self) -> None:
        """The SIGHUP handler, on the event loop: the file is read and parsed in a thread
        (red-team R11), one reload at a time; a SIGHUP during one asks for another."""
        if self._reloading is not None and not self._reloading.done():
            self._again = True
            return
        self._reloading = asyncio.ensure_future(self._reload_until_settled())

    async def _reload_until_settled(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            await self.reload()

    async def reload(self) -> bool:
        """Re-read the file; False (and the old config kept, said at warning level) when
        it is bad, empty, or would turn authentication or TLS off: a file caught
        mid-write must never open the exporter (red-team R8: an empty file turned basic
        auth off, logged at info)."""
        if self.path is None:
            log.info("SIGHUP: no --web.config.file to reload")
            return True
        try:
            cfg = await asyncio.to_thread(load_web_config, self.path, False)
        except WebConfigError as exc:
            log.warning("web config not reloaded, keeping the old one: %s", exc)
            return False
        return self.adopt(cfg)

    def adopt(self, cfg: WebConfig) -> bool:
        """Apply a newly read config unless it would switch TLS or turn auth off."""
        refusal = reload_refusal(self.config, cfg)
        if refusal is not None:
            log.warning("web config not reloaded from %s, keeping the old one: %s",
                        self.path, refusal)
            return False
        old = self.config.tls
        if old is not None and cfg.tls is not None and (
                old.verify_mode, old.min_version, old.max_version, old.ciphers) != (
                cfg.tls.verify_mode, cfg.tls.min_version, cfg.tls.max_version,
                cfg.tls.ciphers):
            log.warning("web config reloaded; TLS versions, ciphers and client auth type "
                        "take effect at the next start")
        self._apply(cfg)
        log.info("web config reloaded from %s", self.path)
        return True


def reload_refusal(old: WebConfig, new: WebConfig) -> str | None:
    """Why ``new`` may not replace ``old`` on SIGHUP (None: it may). What opens the
    exporter (auth or TLS off) takes a restart: a truncated file reads the same."""
    if (new.tls is None) != (old.tls is None):
        return "TLS cannot be switched on or off without a restart"
    if old.users and not new.users:
        return ("it has no basic_auth_users (truncated mid-write?); turning "
                "authentication off takes a restart")
    if old.tls is not None and new.tls is not None and (
            (old.tls.allowed_sans is not None and new.tls.allowed_sans is None)
            or (old.tls.verify_mode != ssl.CERT_NONE and new.tls.verify_mode == ssl.CERT_NONE)):
        return "client certificate checks cannot be turned off without a restart"
    return None


SECURITY_KEY = web.AppKey("security", Security)
GUARD_KEY = web.AppKey("connections", ConnectionGuard)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class _Renders:
    """One rendering per (collection, format), shared by the scrapes that wait on it, in a
    thread of its own so that renders never queue in front of the collectors."""

    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="render"))
    snapshot: object = None
    bodies: dict[str | None, asyncio.Future[tuple[bytes, str]]] = field(default_factory=dict)

    async def get(self, snapshot: object, accept: str | None,
                  make: Callable[[], tuple[bytes, str]]) -> tuple[bytes, str]:
        if snapshot is not self.snapshot:
            self.snapshot, self.bodies = snapshot, {}
        key = "om" if accept and "application/openmetrics-text" in accept else None
        fut = self.bodies.get(key)
        if fut is None:
            fut = self.bodies[key] = asyncio.get_running_loop().run_in_executor(
                self.pool, make)
        return await asyncio.shield(fut)


RENDERS_KEY = web.AppKey("renders", _Renders)
AUTH_POOL_KEY = web.AppKey("auth_pool", BoundedPool)
# One bcrypt at a time (~70 ms at cost 10), eight waiting, each answered within 2 s or
# refused with 503: a flood of wrong passwords costs one core and never an unbounded
# queue, and a cached verdict (Prometheus's) never waits for it.
AUTH_WORKERS, AUTH_QUEUE, AUTH_DEADLINE = 1, 8, 2.0

LANDING = """<!doctype html>
<html><head><title>headroom exporter</title></head>
<body>
<h1>headroom {version}</h1>
<p>True host memory of every pod, container and vLLM process on this node, so an OOM kill
can be seen coming.</p>
<ul>
<li><a href="metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="healthz">/healthz</a>: liveness</li>
<li><a href="debug/oom/">/debug/oom/</a>: flight-recorder documents of OOM kills</li>
</ul>
<h2>Collectors</h2>
<p>{collectors}</p>
</body></html>
"""


async def metrics(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    snapshot = await exporter.snapshot()
    accept = request.headers.get("Accept")
    # Rendering a large node is CPU work: keep it off the event loop too.
    body, content_type = await request.app[RENDERS_KEY].get(
        snapshot, accept,
        lambda: encode([*render(snapshot), *exporter.self_metrics.families()], accept))
    resp = web.Response(body=body)
    resp.headers["Content-Type"] = content_type
    return resp


# The post-mortem pages draw hostile strings (process and pod names), escaped; this policy
# is the second wall: nothing may run or load, whatever got through.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _html(request: web.Request) -> bool:
    return wants_html(request.headers.get("Accept"), request.query.get("format"))


@dataclass
class _Pages:
    """The /debug/oom/ pages' work: one thread of its own with a short queue (never the
    default executor, where the collectors run), and the index from a cache; concurrent
    index requests share one build."""

    pool: BoundedPool = field(default_factory=lambda: BoundedPool(
        "pages", workers=1, queue=8, deadline=10.0))
    index: IndexCache = field(default_factory=IndexCache)
    building: asyncio.Future[str] | None = None

    async def index_page(self, docs: DocumentStore) -> str:
        if self.building is None or self.building.done():
            self.building = asyncio.ensure_future(
                self.pool.run(lambda: self.index.page(docs)))
        return await asyncio.shield(self.building)


PAGES_KEY = web.AppKey("pages", _Pages)


def _busy(exc: Busy) -> web.HTTPServiceUnavailable:
    return web.HTTPServiceUnavailable(text=f"busy: {exc}\n", headers={"Retry-After": "1"})


async def oom_index(request: web.Request) -> web.Response:
    """HTML to browsers, JSON to scripts (``Accept: application/json``, ``?format=json``)."""
    store = request.app[EXPORTER_KEY].postmortem.store
    pages = request.app[PAGES_KEY]
    try:
        if not _html(request):
            names = await pages.pool.run(store.names)
            return web.json_response({"documents": [f"/debug/oom/{n}" for n in names]})
        page = await pages.index_page(store)
    except Busy as exc:
        raise _busy(exc) from None
    return web.Response(text=page, content_type="text/html", headers=PAGE_HEADERS)


async def oom_document(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    pm = request.app[EXPORTER_KEY].postmortem
    pool = request.app[PAGES_KEY].pool
    try:
        doc = await pool.run(lambda: pm.get_document(name))
        if doc is None:
            raise web.HTTPNotFound(text="no such OOM document\n")
        if not _html(request):
            return web.json_response(doc)
        page = await pool.run(lambda: render_document(name, doc))
    except Busy as exc:
        raise _busy(exc) from None
    return web.Response(text=page, content_type="text/html", headers=PAGE_HEADERS)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def landing(request: web.Request) -> web.Response:
    cfg = request.app[EXPORTER_KEY].config
    text = LANDING.format(
        version=html.escape(__version__),
        collectors=html.escape(", ".join(sorted(cfg.collectors)) or "none"),
    )
    return web.Response(text=text, content_type="text/html")


@web.middleware
async def security_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Rate limit, client certificate SANs, then basic auth, as exporter-toolkit orders
    them; /healthz is left open to basic auth (it says only "ok") so that the kubelet's
    probe works, and stays behind TLS client auth like everything else."""
    sec = request.app[SECURITY_KEY]
    if sec.limiter is not None and not sec.limiter.allow():
        raise web.HTTPTooManyRequests(text="too many requests\n")
    tls = sec.config.tls
    if tls is not None and tls.allowed_sans is not None:
        sans = peer_sans(request.transport.get_extra_info("peercert")
                         if request.transport else None)
        if not set(sans) & set(tls.allowed_sans):
            raise web.HTTPForbidden(text="client certificate SAN not allowed\n")
    if sec.auth.enabled and request.path != "/healthz":
        header = request.headers.get("Authorization")
        ok = sec.auth.cached(header)
        if ok is None:  # bcrypt: off the loop, in a bounded pool of its own
            auth = sec.auth
            try:
                ok = await request.app[AUTH_POOL_KEY].run(lambda: auth.check(header))
            except Busy as exc:
                raise _busy(exc) from None
        if not ok:
            raise web.HTTPUnauthorized(text="unauthorized\n",
                                       headers={"WWW-Authenticate": "Basic"})
    return await handler(request)


async def _add_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in request.app[SECURITY_KEY].config.headers.items():
        response.headers[name] = value


def make_app(exporter: Exporter, security: Security | None = None,
             guard: ConnectionGuard | None = None) -> web.Application:
    guard = guard if guard is not None else ConnectionGuard()
    app = web.Application(middlewares=[guard.middleware, security_middleware])
    app[EXPORTER_KEY] = exporter
    app[SECURITY_KEY] = security if security is not None else Security(None)
    app[GUARD_KEY] = guard
    app[RENDERS_KEY] = _Renders()
    app[PAGES_KEY] = _Pages()
    app[AUTH_POOL_KEY] = BoundedPool("auth", AUTH_WORKERS, AUTH_QUEUE, AUTH_DEADLINE)
    app.on_response_prepare.append(_add_headers)
    app.on_cleanup.append(_shutdown_pools)
    app.cleanup_ctx.append(_sweep_connections)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/debug/oom/", oom_index)
    app.router.add_get("/debug/oom/{name}", oom_document)
    app.router.add_get("/", landing)
    return app


async def _sweep_connections(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.ensure_future(app[GUARD_KEY].run())
    yield
    task.cancel()


async def _shutdown_pools(app: web.Application) -> None:
    app[RENDERS_KEY].pool.shutdown(wait=False, cancel_futures=True)
    app[AUTH_POOL_KEY].shutdown()
    app[PAGES_KEY].pool.shutdown()


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
