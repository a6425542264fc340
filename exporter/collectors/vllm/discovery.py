"""Where each local vLLM is reached: its /metrics URL and its KV-event endpoints.

Inside Kubernetes a vLLM API server is found among the tracked processes (procfs names it
by its command line); its pod IP comes from the API (or, without one, from the pod's own
network namespace), its port from the ``prometheus.io/*`` annotations, the container ports
or the command line. On a bare host the command line says where it listens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from exporter.collectors.procfs import ProcfsData, is_vllm_api_server
from exporter.collectors.vllm.metrics import VllmParseError, fetch_text
from exporter.model import CgroupRef, PodDirectory
from exporter.paths import HostPaths, read_text

DEFAULT_PORT = 8000

ANNOTATION_PORT = "prometheus.io/port"
ANNOTATION_PATH = "prometheus.io/path"
ANNOTATION_SCHEME = "prometheus.io/scheme"
_WILDCARD_HOSTS = ("", "*", "0.0.0.0", "::", "[::]")


def _hostport(host: str, port: int) -> str:
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


def port_from_argv(argv: Sequence[str]) -> int | None:
    return _port(_flag(argv, "--port"))


def metrics_url_from_argv(argv: Sequence[str], *, default_host: str = "127.0.0.1") -> str | None:
    """/metrics URL of a bare-host vLLM from its command line; None if it is not one.

    A wildcard ``--host`` (or none) means every address: use ``default_host``.
    """
    if not is_vllm_api_server(argv):
        return None
    host = _flag(argv, "--host") or ""
    if host in _WILDCARD_HOSTS:
        host = default_host
    port = port_from_argv(argv) or DEFAULT_PORT
    return f"http://{_hostport(host, port)}/metrics"


def metrics_url_for_pod(
    pod_ip: str,
    annotations: Mapping[str, str],
    container_ports: Sequence[int] = (),
    argv: Sequence[str] | None = None,
) -> str:
    """/metrics URL of a vLLM pod.

    Port: the ``prometheus.io/port`` annotation; else a declared container port (the one
    ``--port`` names, else 8000, else the first); else ``--port`` of the command line; else
    8000. Path and scheme from ``prometheus.io/path`` and ``/scheme``.
    """
    cli_port = port_from_argv(argv) if argv else None
    port = _port(annotations.get(ANNOTATION_PORT))
    if port is None and container_ports:
        for choice in (cli_port, DEFAULT_PORT):
            if choice in container_ports:
                port = choice
                break
        else:
            port = container_ports[0]
    port = port or cli_port or DEFAULT_PORT
    path = annotations.get(ANNOTATION_PATH) or "/metrics"
    if not path.startswith("/"):
        path = "/" + path
    scheme = annotations.get(ANNOTATION_SCHEME, "http").lower()
    if scheme not in ("http", "https"):
        scheme = "http"
    return f"{scheme}://{_hostport(pod_ip, port)}{path}"


def base_url(metrics_url: str) -> str:
    """``http://h:p/metrics`` -> ``http://h:p`` (for /kv_event_sources and friends)."""
    scheme, rest = metrics_url.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


# --- KV-event endpoints ---------------------------------------------------------------


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
    return f"tcp://{_hostport(host, int(port))}"


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


# --- targets ---------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmTarget:
    cgroup: str  # the container cgroup it runs in ("" for an explicit --vllm.endpoint)
    url: str  # /metrics
    host: str  # where its KV-event endpoints are reached
    argv: tuple[str, ...] = ()


def pod_ip_from_fib_trie(text: str) -> str | None:
    """The pod's own IPv4 address from /proc/PID/net/fib_trie (its network namespace):
    the first ``/32 host LOCAL`` entry that is not loopback. Used when the Kubernetes API
    is not available to give the pod IP."""
    last = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("|--", "+--")):
            last = stripped[3:].strip()
        elif stripped == "/32 host LOCAL" and last and not last.startswith("127."):
            return last
    return None


def _pod_ip(ref: CgroupRef, procfs: ProcfsData, paths: HostPaths) -> str:
    for p in procfs.processes.get(ref.path, ())[:1]:
        try:
            return pod_ip_from_fib_trie(read_text(paths.proc_file(p.pid, "net/fib_trie"))) or ""
        except OSError:
            continue
    return ""


def find_targets(
    refs: Sequence[CgroupRef],
    procfs: ProcfsData | None,
    pods: PodDirectory | None,
    paths: HostPaths,
    explicit: Sequence[str],
) -> tuple[list[VllmTarget], list[str]]:
    """vLLM API servers found among the tracked processes (plus explicit URLs); and the
    ones that cannot be reached, as error lines."""
    targets: list[VllmTarget] = []
    problems: list[str] = []
    by_path = {r.path: r for r in refs}
    for path, argv in sorted((procfs.vllm_argv if procfs else {}).items()):
        ref = by_path.get(path)
        if ref is None or procfs is None:
            continue
        if ref.pod_uid is None:  # a bare host: the command line says where
            url = metrics_url_from_argv(argv)
            if url is not None:
                targets.append(VllmTarget(path, url, "127.0.0.1", argv))
            continue
        info = pods.lookup(ref.pod_uid) if pods is not None else None
        pod_ip = info.pod_ip if info is not None else ""
        ports: tuple[int, ...] = ()
        annotations: Mapping[str, str] = {}
        if info is not None:
            annotations = info.annotations
            ports = next((c.ports for c in info.containers
                          if c.container_id == ref.container_id), ())
        pod_ip = pod_ip or _pod_ip(ref, procfs, paths)
        if not pod_ip:
            problems.append(f"{path}: no pod IP to reach vLLM")
            continue
        targets.append(VllmTarget(path, metrics_url_for_pod(pod_ip, annotations, ports, argv),
                                  pod_ip, argv))
    for url in explicit:
        host = base_url(url).split("://", 1)[1]
        targets.append(VllmTarget("", url, host.rsplit(":", 1)[0].strip("[]")))
    return targets, problems
