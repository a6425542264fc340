"""Reading a vLLM's /metrics: one GET with a total timeout, a size cap and byte budgets.

A pod answers what it likes on its port: a body is cut at a size cap, what all reads of
one scrape (and each pod's reads) may hold at once is bounded (``ByteBudget``,
``Reservation``), and only the lines ``parse_vllm_metrics`` reads are kept as the body
streams in. A URL may carry credentials: they are sent, never written in an error.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from exporter.collectors.vllm.metrics import USED_FAMILIES


class VllmScrapeError(Exception):
    """Reading /metrics failed: connection, HTTP status, timeout or size cap."""


class VllmBodyTooLarge(VllmScrapeError):
    """The body went past the size cap; reading stopped there."""


@dataclass
class ByteBudget:
    """Bytes that reads may hold at once (a byte semaphore that never waits: a read that
    cannot get its next chunk fails, so a pod that floods costs only its own reads)."""

    limit: int
    used: int = 0
    peak: int = 0  # the most held at once (for the benchmarks)

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        self.peak = max(self.peak, self.used)
        return True

    def give(self, n: int) -> None:
        self.used -= n


@dataclass
class Reservation:
    """What one read holds of several budgets (the scrape's and its pod's)."""

    budgets: tuple[ByteBudget, ...] = ()
    held: int = 0

    def take(self, n: int) -> bool:
        for i, b in enumerate(self.budgets):
            if not b.take(n):
                for done in self.budgets[:i]:
                    done.give(n)
                return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        for b in self.budgets:
            b.give(n)
        self.held -= n

    def release(self) -> None:
        self.give(self.held)


_USED = frozenset(n.encode() for n in USED_FAMILIES)
MAX_KEPT_LINES = 4096  # lines kept per body: 16 engines x 10 families x 16 API servers
MAX_LINE = 64 << 10  # a longer line is no vLLM sample: skipped unread (no quadratic join)


def kept_lines(lines: bytes) -> list[bytes]:
    """The sample lines (each ending in a newline) the parser needs, in order."""
    out = []
    for line in lines.splitlines(keepends=True):
        if line.startswith(b"process_"):
            out.append(line)
            continue
        if not line.startswith(b"vllm:"):
            continue
        end = min((i for i in (line.find(b"{"), line.find(b" ")) if i >= 0), default=-1)
        if line[:end] in _USED:
            out.append(line)
    return out


async def read_capped(resp: aiohttp.ClientResponse, max_bytes: int, chunk: int = 65536,
                      reservation: Reservation | None = None, *, filter_lines: bool = False
                      ) -> bytes:
    """The response body, or ``VllmBodyTooLarge`` as soon as it passes ``max_bytes``, or
    what it holds passes the ``reservation``'s budgets. With ``filter_lines`` only the
    ``KEPT_PREFIXES`` lines are kept as they arrive (and held against the budgets)."""
    if resp.content_length is not None and resp.content_length > max_bytes:
        raise VllmBodyTooLarge(f"Content-Length {resp.content_length} > cap {max_bytes}")
    held = reservation or Reservation()
    seen = lines = 0
    skipping = False
    buf = bytearray()
    tail = b""
    async for part in resp.content.iter_chunked(chunk):
        seen += len(part)
        if seen > max_bytes:
            raise VllmBodyTooLarge(f"body passed the {max_bytes}-byte cap")
        if not held.take(len(part)):
            raise VllmBodyTooLarge("body passed the scrape's or the pod's byte budget")
        if not filter_lines:
            buf += part
            continue
        if skipping:  # the rest of a line too long to be vLLM's
            nl = part.find(b"\n")
            held.give(len(part) if nl < 0 else nl + 1)
            if nl < 0:
                continue
            part, skipping = part[nl + 1:], False
        data = tail + part
        cut = data.rfind(b"\n") + 1
        kept = kept_lines(data[:cut])
        lines += len(kept)
        if lines > MAX_KEPT_LINES:
            raise VllmBodyTooLarge(f"more than {MAX_KEPT_LINES} vLLM series")
        before, tail = len(tail) + len(part), data[cut:]
        if len(tail) > MAX_LINE:
            tail, skipping = b"", True
        size = sum(map(len, kept))
        buf += b"".join(kept)
        held.give(before - size - len(tail))
    if filter_lines and tail:
        buf += b"".join(kept_lines(tail + b"\n"))
    return bytes(buf)


def redact_url(url: str) -> str:
    """A URL fit for labels and logs: no ``user:password@``, no query (tokens travel
    there too), no fragment."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    host = authority.rpartition("@")[2]
    path = path.split("?", 1)[0].split("#", 1)[0]
    return f"{scheme}{sep}{host}{slash}{path}"


def _scrub(text: str, url: str) -> str:
    """An error text with the URL (and any credentials in it) replaced by its redacted
    form: aiohttp's messages quote the URL they were given."""
    safe = redact_url(url)
    text = text.replace(url, safe)
    userinfo = url.partition("://")[2].split("/", 1)[0].rpartition("@")[0]
    if userinfo:
        text = text.replace(userinfo, "***")
    return text


async def fetch_text(
    session: aiohttp.ClientSession, url: str, *, timeout: float, max_bytes: int,
    reservation: Reservation | None = None, filter_lines: bool = False,
) -> str:
    """GET ``url`` as text within ``timeout`` seconds in all (connect + headers + body).
    Credentials in ``url`` are sent (basic auth), never written in an error. What the
    body holds stays on ``reservation`` until the caller releases it."""
    shown = redact_url(url)

    async def get() -> bytes:
        async with session.get(url, allow_redirects=False) as resp:
            if resp.status != 200:
                raise VllmScrapeError(f"GET {shown}: HTTP {resp.status}")
            return await read_capped(resp, max_bytes, reservation=reservation,
                                     filter_lines=filter_lines)

    try:
        body = await asyncio.wait_for(get(), timeout)
    except asyncio.TimeoutError as exc:  # not the builtin TimeoutError before 3.11
        raise VllmScrapeError(f"GET {shown}: no complete answer within {timeout:g}s") from exc
    except aiohttp.ClientError as exc:
        raise VllmScrapeError(_scrub(f"GET {shown}: {exc}", url)) from exc
    return body.decode("utf-8", errors="replace")
