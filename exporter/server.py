"""The aiohttp application: /metrics, /healthz, /debug/oom/ and a landing page."""

from __future__ import annotations

import asyncio
import html
import logging

from aiohttp import web

from exporter import __version__
from exporter.encode import encode
from exporter.factory import Exporter
from exporter.oncall.postmortem_page import render_document, render_index, wants_html
from exporter.render import render

log = logging.getLogger(__name__)

EXPORTER_KEY = web.AppKey("exporter", Exporter)

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
    body, content_type = await asyncio.to_thread(
        lambda: encode([*render(snapshot), *exporter.self_metrics.families()], accept)
    )
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


async def oom_index(request: web.Request) -> web.Response:
    """HTML to browsers, JSON to scripts (``Accept: application/json``, ``?format=json``)."""
    pm = request.app[EXPORTER_KEY].postmortem
    names = pm.list_documents()
    if not _html(request):
        return web.json_response({"documents": [f"/debug/oom/{n}" for n in names]})
    # Documents may be read from disk: off the event loop.
    page = await asyncio.to_thread(
        lambda: render_index([(n, pm.get_document(n)) for n in names]))
    return web.Response(text=page, content_type="text/html", headers=PAGE_HEADERS)


async def oom_document(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    pm = request.app[EXPORTER_KEY].postmortem
    doc = await asyncio.to_thread(pm.get_document, name)
    if doc is None:
        raise web.HTTPNotFound(text="no such OOM document\n")
    if not _html(request):
        return web.json_response(doc)
    page = await asyncio.to_thread(render_document, name, doc)
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


def make_app(exporter: Exporter) -> web.Application:
    app = web.Application()
    app[EXPORTER_KEY] = exporter
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/debug/oom/", oom_index)
    app.router.add_get("/debug/oom/{name}", oom_document)
    app.router.add_get("/", landing)
    return app
