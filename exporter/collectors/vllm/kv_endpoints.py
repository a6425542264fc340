"""Where a vLLM publishes its KV cache events, in the form headroom connects to.

From the vLLM's own ``/kv_event_sources`` (0.32+) or, before that, its flags; an endpoint
is followed only on a port that its engine processes really listen on (``allowed_endpoints``:
the kernel says so), since what a vLLM answers, like its command line, is the pod's word.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from exporter.collectors.vllm.metrics import VllmParseError
from exporter.collectors.vllm.reading import fetch_text


def _connect_hostport(host: str, port: int) -> str:
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _flag(argv: Sequence[str], name: str) -> str | None:
    """Value of ``--name V`` or ``--name=V`` (the last one wins, as argparse does)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1 :]
    return value


def _port(raw: str | None) -> int | None:
    if raw is None or not raw.strip().isdigit():
        return None
    port = int(raw)
    return port if 0 < port < 65536 else None


def base_url(metrics_url: str) -> str:
    """``http://h:p/metrics`` -> ``http://h:p`` (for /kv_event_sources and friends)."""
    scheme, rest = metrics_url.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


@dataclass(frozen=True)
class KvEventEndpoint:
    """Where one engine (DP rank) publishes its KV cache events, in connect form."""

    dp_rank: int
    endpoint: str  # tcp://host:port of the PUB socket
    replay_endpoint: str | None = None  # tcp://host:port of the ROUTER socket
    topic: str = ""


def connect_form(endpoint: str, host: str) -> str | None:
    """A bind endpoint (``tcp://*:5557``) as the address to connect to on ``host``.

    None for an endpoint vLLM connects out from (``tcp://collector:5557``): then the
    consumer must bind, which headroom does not do; and for ipc/inproc, which are local to
    vLLM's own mount namespace.
    """
    if not endpoint.startswith("tcp://"):
        return None
    hostport = endpoint[len("tcp://") :]
    bind_host, _, port = hostport.rpartition(":")
    if not port.isdigit():
        return None
    if bind_host.strip("[]") not in ("*", "0.0.0.0", "::", ""):
        return None
    return f"tcp://{_connect_hostport(host, int(port))}"


def offset_endpoint(endpoint: str, dp_rank: int) -> str:
    """vLLM's per-rank port: rank r publishes on the configured port + r."""
    if dp_rank == 0 or not endpoint.startswith("tcp://"):
        return endpoint
    base, _, port = endpoint.rpartition(":")
    return f"{base}:{int(port) + dp_rank}"


def _endpoint_from_config(rank: int, cfg: Mapping[str, Any], host: str) -> KvEventEndpoint | None:
    if not cfg.get("enable_kv_cache_events") or cfg.get("publisher") != "zmq":
        return None
    ep = connect_form(str(cfg.get("endpoint", "tcp://*:5557")), host)
    if ep is None:
        return None
    replay = cfg.get("replay_endpoint")
    return KvEventEndpoint(
        dp_rank=rank,
        endpoint=ep,
        replay_endpoint=connect_form(str(replay), host) if replay else None,
        topic=str(cfg.get("topic") or ""),
    )


def parse_kv_event_sources(body: Any, host: str) -> tuple[KvEventEndpoint, ...]:
    """The JSON of ``GET /kv_event_sources`` (vLLM 0.32+): ``{"<dp rank>": KVEventsConfig}``.

    The endpoints there are already offset per rank, in bind form: we connect to ``host``,
    the vLLM's own address.
    """
    if not isinstance(body, Mapping):
        raise VllmParseError(f"/kv_event_sources: expected an object, got {type(body).__name__}")
    out = []
    for rank_raw, cfg in body.items():
        if not str(rank_raw).isdigit() or not isinstance(cfg, Mapping):
            continue
        ep = _endpoint_from_config(int(rank_raw), cfg, host)
        if ep is not None:
            out.append(ep)
    return tuple(sorted(out, key=lambda e: e.dp_rank))


def kv_event_endpoints_from_argv(argv: Sequence[str], host: str) -> tuple[KvEventEndpoint, ...]:
    """For vLLM before 0.32: ``--kv-events-config`` JSON and ``--data-parallel-size``."""
    raw = _flag(argv, "--kv-events-config")
    if not raw:
        return ()
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError:
        return ()
    if not isinstance(cfg, Mapping):
        return ()
    size = _port(_flag(argv, "--data-parallel-size-local") or _flag(argv, "--data-parallel-size"))
    start = _port(_flag(argv, "--data-parallel-start-rank")) or 0
    out = []
    for rank in range(start, start + (size or 1)):
        ranked = dict(cfg)
        ranked["endpoint"] = offset_endpoint(str(cfg.get("endpoint", "tcp://*:5557")), rank)
        if cfg.get("replay_endpoint"):
            ranked["replay_endpoint"] = offset_endpoint(str(cfg["replay_endpoint"]), rank)
        ep = _endpoint_from_config(rank, ranked, host)
        if ep is not None:
            out.append(ep)
    return tuple(out)


async def fetch_kv_event_sources(
    session: aiohttp.ClientSession, base: str, host: str, *, timeout: float
) -> tuple[KvEventEndpoint, ...]:
    """``GET {base}/kv_event_sources``; ``VllmScrapeError`` when the route is missing (<0.32)."""
    text = await fetch_text(session, f"{base}/kv_event_sources", timeout=timeout, max_bytes=1 << 20)
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise VllmParseError(f"/kv_event_sources: not JSON: {exc}") from exc
    return parse_kv_event_sources(body, host)


def allowed_endpoints(endpoints: Sequence[KvEventEndpoint],
                      ports: frozenset[int] | None) -> tuple[KvEventEndpoint, ...]:
    """KV-event endpoints on ports the vLLM's processes listen on (the kernel says so);
    a replay endpoint elsewhere is dropped (a vLLM's answer, like its command line, is
    the pod's word, not the kernel's)."""
    if ports is None:
        return tuple(endpoints)

    def port(ep: str) -> int:
        tail = ep.rpartition(":")[2]
        return int(tail) if tail.isdigit() else -1

    out = []
    for ep in endpoints:
        if port(ep.endpoint) not in ports:
            continue
        replay = ep.replay_endpoint
        if replay is not None and port(replay) not in ports:
            replay = None
        out.append(replace(ep, replay_endpoint=replay))
    return tuple(out)
