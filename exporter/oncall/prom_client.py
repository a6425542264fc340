"""A small async client for Prometheus' HTTP query API (aiohttp).

Only what ``headroom explain`` needs: instant queries, TLS (CA, client certificate,
skip-verify) and basic auth with the password read from a file, so it works against a
Prometheus behind the same exporter-toolkit web config headroom itself uses.
"""

from __future__ import annotations

import asyncio
import json
import math
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp


class PromError(Exception):
    """Prometheus could not be reached or refused a query."""


def url_problem(url: str) -> str | None:
    """Why a Prometheus base URL cannot be used, or None: a missing scheme is the common
    slip (``prometheus:9090``), and aiohttp's own error for it says nothing useful."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"not a URL: {url!r} ({exc})"
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"the URL needs http:// or https:// (got {url!r})"
    return None


@dataclass(frozen=True)
class PromAuth:
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    username: str | None = None
    password_file: Path | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class PromSample:
    labels: Mapping[str, str]
    value: float


def ssl_context(auth: PromAuth) -> ssl.SSLContext | bool:
    """``True`` (aiohttp's default verification) unless the options ask for more."""
    if auth.ca_file is None and auth.cert_file is None and not auth.insecure_skip_verify:
        return True
    ctx = ssl.create_default_context(cafile=str(auth.ca_file) if auth.ca_file else None)
    if auth.cert_file is not None:
        ctx.load_cert_chain(str(auth.cert_file),
                            str(auth.key_file) if auth.key_file else None)
    if auth.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def basic_auth(auth: PromAuth) -> aiohttp.BasicAuth | None:
    if auth.username is None:
        return None
    password = ""
    if auth.password_file is not None:
        # A trailing newline is an editor's, not the password's (as in Prometheus).
        password = auth.password_file.read_text().rstrip("\r\n")
    return aiohttp.BasicAuth(auth.username, password)


@dataclass(frozen=True)
class RangeSeries:
    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


MAX_ANSWER_BYTES = 32 << 20  # one answer; a node's whole history for one pod is < 2 MiB


def parse_matrix(body: Mapping[str, Any]) -> list[RangeSeries]:
    """The ``data`` of a successful range query -> series of finite points."""
    data = body.get("data") or {}
    out: list[RangeSeries] = []
    if data.get("resultType") != "matrix":
        return out
    for r in data.get("result", []):
        pts = tuple((float(t), v) for t, x in r.get("values", [])
                    if math.isfinite(v := float(x)))
        out.append(RangeSeries(dict(r.get("metric", {})), pts))
    return out


def parse_vector(body: Mapping[str, Any]) -> list[PromSample]:
    """The ``data`` of a successful instant query -> samples (vector or scalar).
    NaN and infinities are dropped: a ratio over nothing is no evidence."""
    data = body.get("data") or {}
    kind = data.get("resultType")
    out: list[PromSample] = []
    if kind == "vector":
        for r in data.get("result", []):
            value = float(r["value"][1])
            if math.isfinite(value):
                out.append(PromSample(dict(r.get("metric", {})), value))
    elif kind == "scalar":
        value = float(data["result"][1])
        if math.isfinite(value):
            out.append(PromSample({}, value))
    return out


class PromClient:
    """``async with PromClient(url, auth) as prom: await prom.query(expr, at)``."""

    def __init__(self, url: str, auth: PromAuth | None = None, timeout: float = 30.0,
                 concurrency: int = 8, max_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.url = url.rstrip("/")
        self.max_bytes = max_bytes
        self.auth = auth or PromAuth()
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        # Explain sends a few dozen queries at once: bound them, Prometheus is shared.
        self._slots = asyncio.Semaphore(concurrency)

    async def __aenter__(self) -> PromClient:
        connector = aiohttp.TCPConnector(ssl=ssl_context(self.auth))
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, auth=basic_auth(self.auth),
            headers={"User-Agent": "headroom-explain"})
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()

    async def _post(self, path: str, form: Mapping[str, str]) -> dict[str, Any]:
        """POST a query form (long selectors stay out of URLs and access logs) and read at
        most ``max_bytes`` of the answer: a Prometheus (or anything at that URL) cannot
        make the CLI hold more."""
        assert self._session is not None, "use PromClient as an async context manager"
        async with self._slots:
            try:
                async with self._session.post(f"{self.url}{path}", data=dict(form)) as resp:
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in resp.content.iter_chunked(1 << 16):
                        size += len(chunk)
                        if size > self.max_bytes:
                            raise PromError(f"{self.url}: answer larger than "
                                            f"{self.max_bytes >> 20} MiB; narrow the query")
                        chunks.append(chunk)
                    raw = b"".join(chunks)
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        hint = (" (check --prometheus.username and --prometheus.password-file)"
                                if resp.status in (401, 403) else "")
                        raise PromError(f"{self.url}: HTTP {resp.status} {resp.reason}, "
                                        f"not a Prometheus answer{hint}") from None
            except aiohttp.ClientError as exc:
                raise PromError(f"{self.url}: {exc}") from exc
            except asyncio.TimeoutError as exc:
                raise PromError(f"{self.url}: no answer in {self._timeout.total} s") from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise PromError(f"{self.url}: query failed: {error or body!r}"[:500])
        return body

    async def query(self, expr: str, at: float | None = None) -> list[PromSample]:
        form = {"query": expr}
        if at is not None:
            form["time"] = f"{at:.3f}"
        return parse_vector(await self._post("/api/v1/query", form))

    async def query_range(self, expr: str, start: float, end: float, step: float
                          ) -> list[RangeSeries]:
        form = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                "step": f"{step:g}"}
        return parse_matrix(await self._post("/api/v1/query_range", form))

    async def query_many(self, exprs: Sequence[str], at: float | None = None
                         ) -> list[list[PromSample]]:
        return list(await asyncio.gather(*(self.query(e, at) for e in exprs)))
