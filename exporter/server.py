"""The aiohttp application: /metrics, /healthz and a landing page."""

from __future__ import annotations

import asyncio
import html
import logging

from aiohttp import web

from exporter import __version__
from exporter.encode import encode
from exporter.factory import Exporter
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


async def oom_index(request: web.Request) -> web.Response:
    names = request.app[EXPORTER_KEY].postmortem.list_documents()
    return web.json_response({"documents": [f"/debug/oom/{n}" for n in names]})


async def oom_document(request: web.Request) -> web.Response:
    doc = request.app[EXPORTER_KEY].postmortem.get_document(request.match_info["name"])
    if doc is None:
        raise web.HTTPNotFound(text="no such OOM document\n")
    return web.json_response(doc)


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
