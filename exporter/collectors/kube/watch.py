"""Pod UID -> namespace / pod / container names, from the Kubernetes API (this node only).

headroom runs as a DaemonSet, so each instance LISTs the pods of its own node
(``fieldSelector=spec.nodeName=<node>``) and then WATCHes them. Lookups are answered
from an immutable dict that the watcher replaces wholesale, so a scrape never waits on
the network and never sees a half-applied update. When the API goes away the last known
pods are kept: a pod must not lose its name (and so its series) because the apiserver
restarted. No kubernetes client library: one LIST and one WATCH over aiohttp are enough.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import aiohttp

from exporter.collectors.kube.parse import (
    MAX_LINE_BYTES,
    LineSplitter,
    WatchEvent,
    as_list,
    as_mapping,
    as_str,
    backoff_delay,
    decode_watch_event,
    normalize_uid,
    parse_pod,
)
from exporter.model import PodInfo

log = logging.getLogger("exporter.kube")

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_TOKEN_PATH = SERVICE_ACCOUNT_DIR / "token"
DEFAULT_CA_PATH = SERVICE_ACCOUNT_DIR / "ca.crt"

SessionFactory = Callable[[], aiohttp.ClientSession]
PathLike = str | os.PathLike[str]


# --- errors ------------------------------------------------------------------------------


class KubeApiError(Exception):
    """A failed request or a broken stream; the message is what gets logged."""


class _Gone(Exception):
    """410: our resourceVersion or continue token is too old. Not an error: relist."""


async def _status_message(resp: aiohttp.ClientResponse) -> str:
    """The ``message`` of a v1 Status body, else the start of the body."""
    body = await resp.content.read(64 * 1024)
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])
    return body[:200].decode("utf-8", "replace").strip()


# --- the watcher -------------------------------------------------------------------------


class KubePodWatcher:
    """Keeps this node's pods from the Kubernetes API; implements ``PodDirectory``.

    ``lookup`` is synchronous, O(1) and thread-safe: it reads one dict reference that
    ``run`` replaces (never mutates) on every change.
    """

    def __init__(
        self,
        api_url: str,
        token_path: PathLike | None,
        ca_file: PathLike | None,
        node_name: str,
        request_timeout: float = 10.0,
        session_factory: SessionFactory | None = None,
        *,
        watch_timeout: int = 300,
        page_limit: int = 500,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        backoff_jitter: float = 0.2,
        max_line_bytes: int = MAX_LINE_BYTES,
        list_from_cache: bool = True,
    ) -> None:
        self._pods_url = api_url.rstrip("/") + "/api/v1/pods"
        self._token_path = token_path
        self._ca_file = ca_file
        self._node = node_name
        self._request_timeout = request_timeout
        self._session_factory = session_factory or self._default_session
        self._watch_timeout = watch_timeout
        self._page_limit = page_limit
        self._backoff = (backoff_initial, backoff_max, backoff_jitter)
        self._max_line = max_line_bytes
        self._list_from_cache = list_from_cache

        self._pods: Mapping[str, PodInfo] = MappingProxyType({})
        self._rv = ""
        self._healthy = False
        self._synced = False
        self._last_error = ""
        self._logged_error = ""  # what we last logged, so a repeated failure logs once
        self._error_count = 0

    # --- PodDirectory and status --------------------------------------------------------

    @property
    def api_url(self) -> str:
        """The pods collection URL this watcher lists and watches."""
        return self._pods_url

    def lookup(self, pod_uid: str) -> PodInfo | None:
        return self._pods.get(normalize_uid(pod_uid))

    @property
    def pods(self) -> Mapping[str, PodInfo]:
        """The current pods by UID (an immutable snapshot)."""
        return self._pods

    @property
    def healthy(self) -> bool:
        """The last LIST or WATCH succeeded."""
        return self._healthy

    @property
    def synced(self) -> bool:
        """A full LIST has completed at least once."""
        return self._synced

    @property
    def last_error(self) -> str:
        """The current error ("" while healthy)."""
        return self._last_error

    @property
    def error_count(self) -> int:
        """Failed requests or streams since start."""
        return self._error_count

    @property
    def resource_version(self) -> str:
        return self._rv

    # --- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """LIST, then WATCH, forever. Returns only by cancellation; never raises else."""
        failures = 0  # consecutive, for the backoff
        gone_streak = 0  # 410s without progress in between: back off those too
        need_list = True
        consistent = not self._list_from_cache
        session: aiohttp.ClientSession | None = None
        try:
            while True:
                stage = "LIST" if need_list else "WATCH"
                try:
                    if session is None:
                        session = self._session_factory()
                    if need_list:
                        await self.as_list(session, consistent=consistent)
                        need_list = False
                        failures = 0
                    events = await self._watch(session)
                    if events:
                        failures = gone_streak = 0
                except _Gone as e:
                    # A relist after 410 is a consistent read: the cache may be behind.
                    log.info("kubernetes API: %s: %s; listing again", stage, e)
                    need_list, consistent = True, True
                    gone_streak += 1
                    if gone_streak > 1:
                        await asyncio.sleep(self._delay(gone_streak - 1))
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # any failure at all: log, back off, retry
                    self._fail(stage, e)
                    failures += 1
                    # A fresh session (and TLS context) on the next try: the CA may rotate.
                    if session is not None:
                        await session.close()
                        session = None
                    await asyncio.sleep(self._delay(failures))
        finally:
            if session is not None:
                await session.close()

    def _delay(self, failures: int) -> float:
        initial, cap, jitter = self._backoff
        return backoff_delay(failures, initial, cap, jitter)

    def _default_session(self) -> aiohttp.ClientSession:
        ssl_ctx: ssl.SSLContext | bool = True
        if self._ca_file is not None:
            ssl_ctx = ssl.create_default_context(cafile=os.fspath(self._ca_file))
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_ctx, limit=4))

    def _headers(self) -> dict[str, str]:
        # Read on every request: projected service account tokens rotate (~hourly).
        headers = {"Accept": "application/json"}
        if self._token_path is not None:
            try:
                token = Path(self._token_path).read_text(encoding="utf-8").strip()
            except OSError as e:
                raise KubeApiError(
                    f"cannot read the service account token {self._token_path}: "
                    f"{e.strerror or e}"
                ) from e
            if token:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    def _selector(self) -> dict[str, str]:
        return {"fieldSelector": f"spec.nodeName={self._node}"}

    @contextlib.asynccontextmanager
    async def _get(
        self, session: aiohttp.ClientSession, stage: str, params: Mapping[str, str],
        timeout: aiohttp.ClientTimeout,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A GET of the pods collection answered 200; 410 raises _Gone, others an error."""
        async with session.get(
            self._pods_url, params=params, headers=self._headers(), timeout=timeout
        ) as resp:
            if resp.status == 410:
                raise _Gone(await _status_message(resp))
            if resp.status != 200:
                raise await self._http_error(stage, resp)
            yield resp

    async def _http_error(self, stage: str, resp: aiohttp.ClientResponse) -> KubeApiError:
        msg = f"{stage} pods: HTTP {resp.status} {resp.reason or ''}".rstrip()
        detail = await _status_message(resp)
        if detail and detail != resp.reason:
            msg += f": {detail}"
        if resp.status in (401, 403):
            msg += " (check the service account token and its RBAC: get/list/watch pods)"
        return KubeApiError(msg)

    def _on_node(self, obj: Mapping[str, Any]) -> bool:
        # The field selector already filters; this keeps memory bounded if it did not.
        node = as_str(as_mapping(obj.get("spec")).get("nodeName"))
        return not node or node == self._node

    async def as_list(self, session: aiohttp.ClientSession, *, consistent: bool) -> None:
        pods: dict[str, PodInfo] = {}
        rv = cont = ""
        timeout = aiohttp.ClientTimeout(total=self._request_timeout)
        while True:
            params = {**self._selector(), "limit": str(self._page_limit)}
            if cont:
                params["continue"] = cont  # the apiserver refuses resourceVersion here
            elif not consistent:
                # From the apiserver's watch cache (indexed by node): cheap for etcd when
                # a whole DaemonSet lists at once. The cache may ignore limit; that's fine.
                params["resourceVersion"] = "0"
            async with self._get(session, "LIST", params, timeout) as resp:
                body = await resp.read()
            try:
                doc = json.loads(body)
            except ValueError as e:
                raise KubeApiError(f"LIST pods: the answer is not JSON ({e})") from None
            if not isinstance(doc, dict) or "items" not in doc:
                raise KubeApiError("LIST pods: the answer is not a PodList")
            items = as_list(doc["items"])  # Go encodes an empty list as null
            for item in items:
                if isinstance(item, dict) and self._on_node(item):
                    pod = parse_pod(item)
                    if pod is not None:
                        pods[pod.uid] = pod
            meta = as_mapping(doc.get("metadata"))
            rv = as_str(meta.get("resourceVersion")) or rv
            cont = as_str(meta.get("continue"))
            if not cont:
                break
        if not rv:
            raise KubeApiError("LIST pods: the answer has no metadata.resourceVersion")
        # Only a complete list replaces what we had (pods gone meanwhile disappear).
        self._pods = MappingProxyType(pods)
        self._rv = rv
        first = not self._synced
        self._synced = True
        self._ok()
        if first:
            log.info("kubernetes API: %d pods on node %s", len(pods), self._node)

    async def _watch(self, session: aiohttp.ClientSession) -> int:
        """One WATCH request, until the server ends it. Returns the events applied."""
        # Spread like client-go (timeout x [1, 2)) so a DaemonSet does not reconnect
        # in lockstep.
        seconds = max(1, int(self._watch_timeout * (1.0 + random.random())))
        params = {
            **self._selector(),
            "resourceVersion": self._rv,
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        # No total timeout: the stream is long-lived. A read timeout a bit past the
        # server's own end catches a dead connection.
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self._request_timeout,
            sock_read=seconds + self._request_timeout,
        )
        started = time.monotonic()
        events = 0
        async with self._get(session, "WATCH", params, timeout) as resp:
            self._ok()
            splitter = LineSplitter(self._max_line)
            async for chunk in resp.content.iter_any():
                skipped = splitter.skipped
                lines = splitter.feed(chunk)
                if splitter.skipped != skipped:
                    log.error(
                        "kubernetes API: WATCH pods: skipped an event over %d bytes",
                        self._max_line,
                    )
                for line in lines:
                    try:
                        event = decode_watch_event(line)
                    except ValueError as e:
                        snippet = line[:80].decode("utf-8", "replace")
                        # Re-watch from the last good resourceVersion: nothing is lost.
                        raise KubeApiError(f"WATCH pods: bad line {snippet!r}: {e}") from None
                    self._apply(event)
                    events += 1
        if events == 0 and time.monotonic() - started < 1.0:
            # A server or proxy that closes every watch at once would make us spin.
            raise KubeApiError("WATCH pods: the server closed the stream at once")
        return events

    def _apply(self, event: WatchEvent) -> None:
        obj = event.object
        rv = as_str(as_mapping(obj.get("metadata")).get("resourceVersion"))
        if event.type in ("ADDED", "MODIFIED", "DELETED"):
            pod = parse_pod(obj)
            if pod is not None:
                pods = dict(self._pods)
                if event.type == "DELETED" or not self._on_node(obj):
                    pods.pop(pod.uid, None)
                else:
                    pods[pod.uid] = pod
                self._pods = MappingProxyType(pods)  # one reference swap: atomic for readers
        elif event.type == "ERROR":
            code = obj.get("code")
            message = as_str(obj.get("message")) or as_str(obj.get("reason"))
            if code == 410:
                raise _Gone(message or "resource version too old")
            raise KubeApiError(f"WATCH pods: ERROR event {code}: {message}")
        elif event.type != "BOOKMARK":
            log.debug("kubernetes API: ignoring watch event type %s", event.type)
            return
        if rv:
            self._rv = rv

    def _ok(self) -> None:
        self._healthy = True
        self._last_error = ""
        if self._logged_error:
            log.info(
                "kubernetes API: reachable again, %d pods on node %s",
                len(self._pods), self._node,
            )
            self._logged_error = ""

    def _fail(self, stage: str, exc: BaseException) -> None:
        if isinstance(exc, KubeApiError):
            message = str(exc)
        elif isinstance(exc, asyncio.TimeoutError) and not str(exc):
            message = f"{stage} pods: timed out after {self._request_timeout:g} s"
        else:
            message = f"{stage} pods: {type(exc).__name__}: {exc}"
        message = f"{message} [{self._pods_url}]"
        self._healthy = False
        self._last_error = message
        self._error_count += 1
        if message != self._logged_error:
            # Once per distinct error; _ok() logs the recovery and re-arms this.
            log.warning(
                "kubernetes API: %s; keeping %d known pods, retrying with backoff",
                message, len(self._pods),
            )
            self._logged_error = message
