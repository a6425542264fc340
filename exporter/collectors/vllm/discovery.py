"""Where each local vLLM is reached: its /metrics URL and its KV-event endpoints.

From what the kernel shows, never from a command line (F10): procfs finds each vLLM API
server as the parent of ``VLLM::EngineCore*``/``VLLM::Worker*`` processes, whatever
launched it; ``locate`` lists the TCP sockets it listens on and the address that reaches
them from the exporter (loopback in our own network namespace, the pod's IP in a pod's);
the source probes those for a /metrics body with ``vllm:`` families. KV-event endpoints
come from the vLLM's own ``/kv_event_sources`` (or, before 0.32, its flags) and are
followed only on ports its engine processes really listen on.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from exporter.collectors import procfs
from exporter.collectors.procfs import ProcfsData
from exporter.collectors.vllm.locate import (
    Candidate,
    annotation_ports,
    candidates,
    netns,
    read_listeners,
)
from exporter.collectors.vllm.metrics import VllmParseError, fetch_text, redact_url
from exporter.model import CgroupRef, PodDirectory, PodInfo
from exporter.paths import HostPaths, read_text

ANNOTATION_PATH = "prometheus.io/path"
MAX_CANDIDATES = 64  # listening ports of one API server kept as candidates (the likeliest)
ANNOTATION_SCHEME = "prometheus.io/scheme"


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
    """A /metrics to read: one found on the node, or one given by --vllm.endpoint."""

    cgroup: str  # the container cgroup it runs in ("" for an explicit --vllm.endpoint)
    url: str  # /metrics (may carry credentials: never in a label or a log, see ``shown``)
    host: str  # where its KV-event endpoints are reached
    argv: tuple[str, ...] = ()
    # ports the vLLM's processes listen on: KV-event endpoints are followed only there
    # (None: an explicit endpoint, configured by the operator)
    ports: frozenset[int] | None = None
    pid: int = 0  # the API server (0: explicit)
    engines: tuple[int, ...] = ()  # its engine processes (the CPU tier's region is theirs)

    @property
    def shown(self) -> str:
        return redact_url(self.url)

    @property
    def key(self) -> str:
        """Names one vLLM instance: a new API server process is a new instance."""
        return f"{self.cgroup}#{self.pid}" if self.pid else self.shown


@dataclass(frozen=True)
class VllmServer:
    """A vLLM API server found on the node, and where it may serve /metrics."""

    cgroup: str
    pid: int
    candidates: tuple[Candidate, ...]  # reachable listeners, the likeliest first
    path: str  # /metrics, or the prometheus.io/path annotation
    scheme: str
    ports: frozenset[int]  # every port its API server and engine cores listen on
    argv: tuple[str, ...] = ()
    engines: tuple[int, ...] = ()
    pod: str = ""  # the pod UID (else the cgroup): the unit of the per-pod budgets

    def target(self, c: Candidate) -> VllmTarget:
        return VllmTarget(self.cgroup, f"{self.scheme}://{c.hostport}{self.path}", c.host,
                          self.argv, self.ports, self.pid, self.engines)


def pod_ip_from_fib_trie(text: str) -> str | None:
    """The pod's own IPv4 address from /proc/PID/net/fib_trie of a process in the pod's
    network namespace (its sandbox's: see ``pod_network``): the first ``/32 host LOCAL``
    entry that is not loopback. Used when the Kubernetes API is not available to give
    the pod IP."""
    last = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("|--", "+--")):
            last = stripped[3:].strip()
        elif stripped == "/32 host LOCAL" and last and not last.startswith("127."):
            return last
    return None


MAX_POD_PROCESSES = 512  # processes of one pod looked at to find its sandbox


@dataclass(frozen=True)
class PodNetwork:
    """The network namespace the kubelet made for a pod (its sandbox), and a process in
    it whose /proc/PID/net shows it."""

    netns: int
    pid: int


def start_time(stat: str) -> int:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot); the command
    name (field 2) may hold spaces and parentheses, so fields are counted after its
    last ')'."""
    return int(stat.rpartition(")")[2].split()[19])


def pod_network(pids: Sequence[int], paths: HostPaths) -> PodNetwork | None:
    """The pod's own network namespace: that of its oldest process. The sandbox (pause)
    process starts first and every container joins its namespace; a namespace that a
    process makes for itself later (``unshare -rn``) is younger than that. A process of
    the pod cannot change its start time nor move into another pod's cgroup."""
    procfs_dir = str(paths.procfs)
    best: tuple[int, int, int] | None = None  # (start time, pid, netns)
    for pid in sorted(pids)[:MAX_POD_PROCESSES]:
        try:
            started = start_time(read_text(paths.proc_file(pid, "stat")))
        except (OSError, ValueError, IndexError):
            continue
        ns = netns(procfs_dir, pid)
        if ns is not None and (best is None or (started, pid) < best[:2]):
            best = (started, pid, ns)
    return PodNetwork(best[2], best[1]) if best else None


def _path_and_scheme(annotations: Mapping[str, str]) -> tuple[str, str]:
    path = annotations.get(ANNOTATION_PATH) or "/metrics"
    if not path.startswith("/") or any(c in path for c in "?#@ \r\n") or len(path) > 256:
        path = "/metrics"  # only a path on the vLLM's own port, nothing else
    scheme = annotations.get(ANNOTATION_SCHEME, "http").lower()
    return path, scheme if scheme in ("http", "https") else "http"


def locate_server(cgroup: str, srv: procfs.VllmServer, pod_info: PodInfo | None,
                  paths: HostPaths, own_netns: int | None,
                  argv: Sequence[str] = (), pod: str = "",
                  pod_net: PodNetwork | None = None) -> VllmServer:
    """Where API server ``srv`` listens, as reachable addresses. Raises OSError when its
    descriptors cannot be read (it exited, or no rights on /proc/PID/fd).

    Reachable only in our own network namespace or in the pod's (``pod_net``): an API
    server in a namespace of its own (R5: ``unshare -rn`` + ``ip addr add``) gets no
    candidates, since any address it shows there is its choice, not the pod's. The pod's
    address is the API's pod IP, else the one in the pod's namespace's fib_trie, never
    the server's own."""
    procfs_dir = str(paths.procfs)
    listeners = read_listeners(procfs_dir, srv.pid)
    ports = {s.port for s in listeners}
    for core in srv.engine_cores:
        with contextlib.suppress(OSError):
            ports |= {s.port for s in read_listeners(procfs_dir, core)}
    ns = netns(procfs_dir, srv.pid)
    same = ns is not None and ns == own_netns
    in_pod_netns = pod_net is not None and ns == pod_net.netns
    pod_ips: list[str] = []
    annotations: Mapping[str, str] = {}
    if pod_info is not None:
        annotations = pod_info.annotations
        pod_ips = [pod_info.pod_ip]
    if not same and not any(pod_ips) and pod_net is not None and in_pod_netns:
        with contextlib.suppress(OSError):
            ip = pod_ip_from_fib_trie(read_text(paths.proc_file(pod_net.pid, "net/fib_trie")))
            pod_ips = [ip] if ip else []
    path, scheme = _path_and_scheme(annotations)
    # the pod's namespace when it is known; else only the pod IP the API gives
    reachable = same or (in_pod_netns if pod_net is not None else any(pod_ips))
    found: list[Candidate] = []
    if reachable:
        found = candidates(listeners, same_netns=same, pod_ips=pod_ips,
                           preferred=annotation_ports(annotations))[:MAX_CANDIDATES]
    return VllmServer(cgroup, srv.pid, tuple(found), path, scheme, frozenset(ports),
                      tuple(argv), srv.engines, pod or cgroup)


def find_servers(
    refs: Sequence[CgroupRef],
    procfs_data: ProcfsData | None,
    pods: PodDirectory | None,
    paths: HostPaths,
) -> tuple[list[VllmServer], list[str]]:
    """Every vLLM API server among the tracked processes, with where it listens; and the
    ones that cannot be looked at, as error lines."""
    servers: list[VllmServer] = []
    problems: list[str] = []
    if procfs_data is None:
        return servers, problems
    by_path = {r.path: r for r in refs}
    own = netns(str(paths.procfs), "self")
    pod_pids: dict[str, list[int]] = {}
    for r in refs:
        pod_pids.setdefault(r.pod_uid or r.path, []).extend(
            p.pid for p in procfs_data.processes.get(r.path, ()))
    networks: dict[str, PodNetwork | None] = {}
    for path, found in sorted(procfs_data.vllm_servers.items()):
        ref = by_path.get(path)
        if ref is None:
            continue
        info = pods.lookup(ref.pod_uid) if pods is not None and ref.pod_uid else None
        pod = ref.pod_uid or path
        if pod not in networks:
            networks[pod] = pod_network(pod_pids.get(pod, ()), paths)
        for srv in found:
            try:
                servers.append(locate_server(path, srv, info, paths, own,
                                             procfs_data.vllm_argv.get(path, ()),
                                             pod, networks[pod]))
            except OSError as exc:
                problems.append(f"{path}: vLLM API server {srv.pid}: cannot read its "
                                f"sockets: {exc.strerror or exc}")
    return servers, problems


def explicit_targets(urls: Sequence[str]) -> list[VllmTarget]:
    out = []
    for url in urls:
        host = base_url(url).split("://", 1)[1].rpartition("@")[2]
        out.append(VllmTarget("", url, host.rsplit(":", 1)[0].strip("[]")))
    return out


def allowed_endpoints(endpoints: Sequence[KvEventEndpoint],
                      ports: frozenset[int] | None) -> tuple[KvEventEndpoint, ...]:
    """KV-event endpoints on ports the vLLM's processes listen on (the kernel says so);
    a replay endpoint elsewhere is dropped (F10: a vLLM's answer, like its command line,
    is the pod's word, not the kernel's)."""
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
