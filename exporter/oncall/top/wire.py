"""HTTP for top: the local exporter's /metrics and Prometheus' instant queries, each
answer capped in size."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

from exporter.oncall.prom_client import PromSample, parse_vector

MAX_BODY = 64 << 20  # a node's exposition is a few MB; a Prometheus answer is capped too


def _http(url: str, data: bytes | None = None, timeout: float = 5.0) -> bytes:
    req = urllib.request.Request(url, data=data, headers={
        "Accept": "text/plain, application/json",
        **({"Content-Type": "application/x-www-form-urlencoded"} if data else {})})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body: bytes = r.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise ValueError(f"answer larger than {MAX_BODY >> 20} MiB")
    return body


def fetch(url: str, timeout: float = 2.0) -> str:
    return _http(url, timeout=timeout).decode("utf-8", "replace")


def query_prometheus(base: str, expr: str, timeout: float = 10.0) -> list[PromSample]:
    body = _http(f"{base.rstrip('/')}/api/v1/query",
                 urllib.parse.urlencode({"query": expr}).encode(), timeout)
    doc = json.loads(body)
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, dict) else doc
        raise ValueError(f"query failed: {str(error)[:200]}")
    return parse_vector(doc)

