"""The aiohttp application: /metrics, /healthz, /debug/oom/ and a landing page.

Hardened for a port anyone on the node network can reach: connections are bounded
(``connections.ConnectionGuard``), ``--web.config.file`` adds TLS, basic auth, response
headers and a rate limit (exporter-toolkit's format, ``webconfig``; the config in force
is ``security.Security``), and concurrent scrapes of one collection share one rendering
(``renders``). Work a client can ask for besides a scrape (bcrypt checks, post-mortem
pages) runs in bounded pools of its own (``workpool``), never where the collectors run.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from exporter import __version__
from exporter.assembly.factory import Exporter
from exporter.exposition.encode import encode
from exporter.exposition.render import render
from exporter.postmortem.documents import DocumentStore
from exporter.postmortem.index import IndexCache
from exporter.postmortem.page import render_document, wants_html
from exporter.web.connections import ConnectionGuard
from exporter.web.renders import Renders
from exporter.web.security import Security
from exporter.web.tls import peer_sans
from exporter.web.workpool import BoundedPool, Busy

EXPORTER_KEY = web.AppKey("exporter", Exporter)
SECURITY_KEY = web.AppKey("security", Security)
GUARD_KEY = web.AppKey("connections", ConnectionGuard)
RENDERS_KEY = web.AppKey("renders", Renders)
AUTH_POOL_KEY = web.AppKey("auth_pool", BoundedPool)
# One bcrypt at a time (~70 ms at cost 10), eight waiting, each answered within 2 s or
# refused with 503: a flood of wrong passwords costs one core and never an unbounded
# queue, and a cached verdict (Prometheus's) never waits for it.
AUTH_WORKERS, AUTH_QUEUE, AUTH_DEADLINE = 1, 8, 2.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

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
    app[RENDERS_KEY] = Renders()
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
