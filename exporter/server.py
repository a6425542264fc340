"""The aiohttp application: /metrics, /healthz and a landing page."""

from __future__ import annotations

import asyncio
import html
import logging

from aiohttp import web

from exporter import __version__
from exporter.pipeline import Pipeline
from exporter.render import encode, render

log = logging.getLogger(__name__)

PIPELINE_KEY = web.AppKey("pipeline", Pipeline)

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
    pipeline = request.app[PIPELINE_KEY]
    sections = pipeline.sections()
    snapshot = await pipeline.snapshot()
    accept = request.headers.get("Accept")
    # Rendering a large node is CPU work: keep it off the event loop too.
    body, content_type = await asyncio.to_thread(
        lambda: encode(render(snapshot, sections), accept)
    )
    resp = web.Response(body=body)
    resp.headers["Content-Type"] = content_type
    return resp


async def oom_index(request: web.Request) -> web.Response:
    pm = request.app[PIPELINE_KEY].postmortem
    names = pm.list_documents() if pm is not None else []
    return web.json_response({"documents": [f"/debug/oom/{n}" for n in names]})


async def oom_document(request: web.Request) -> web.Response:
    pm = request.app[PIPELINE_KEY].postmortem
    doc = pm.get_document(request.match_info["name"]) if pm is not None else None
    if doc is None:
        raise web.HTTPNotFound(text="no such OOM document\n")
    return web.json_response(doc)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def landing(request: web.Request) -> web.Response:
    cfg = request.app[PIPELINE_KEY].config
    text = LANDING.format(
        version=html.escape(__version__),
        collectors=html.escape(", ".join(sorted(cfg.collectors)) or "none"),
    )
    return web.Response(text=text, content_type="text/html")


def make_app(pipeline: Pipeline) -> web.Application:
    app = web.Application()
    app[PIPELINE_KEY] = pipeline
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/debug/oom/", oom_index)
    app.router.add_get("/debug/oom/{name}", oom_document)
    app.router.add_get("/", landing)
    return app
