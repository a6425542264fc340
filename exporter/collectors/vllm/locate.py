"""Where a local vLLM serves /metrics, from what the kernel shows, never from a command line.

``find_servers`` turns the API servers that ``identity`` found among the tracked
processes into the addresses to probe; ``VllmTarget`` is one /metrics to read.

A vLLM engine is a process tree: ``VLLM::EngineCore*`` / ``VLLM::Worker*`` processes
under an API server, whatever started it (``vllm serve``, KServe's huggingfaceserver, a
Ray or in-house launcher, a Rust front end): see ``identity``. The API server's listening
TCP sockets (its fds' socket inodes in the tcp tables of its network namespace: see
``sockets``) are the only ports probed, at an address that reaches that namespace:

- the same network namespace as the exporter (a bare host, a hostNetwork pod): loopback
  for a wildcard or loopback bind, else the bound address (one of our own addresses);
- another namespace (a pod): the pod's IP, for a wildcard bind or a bind to that IP; a
  socket bound to anything else (loopback inside the pod) cannot be reached from here.

A probe is a GET of /metrics with the vLLM source's time limit and body cap; the port
whose body has ``vllm:`` families is the target, remembered until the listening sockets
change. A pod annotation (``headroom.io/vllm-port``, else ``prometheus.io/port``) puts
its port first when the API server listens on it.

Why not the command line: any process can write any ``--host``/``--port`` in its
argv, and the exporter (root, on every node) would send requests wherever it says. The
kernel's socket table says where a process really listens, and a process can bind only
addresses of its own namespace.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from exporter.collectors.procfacts import netns, start_time
from exporter.collectors.procfs import ProcfsData
from exporter.collectors.sockets import ListenSocket, listening_of, parse_listening
from exporter.collectors.vllm.identity import ApiServer
from exporter.collectors.vllm.kv_endpoints import base_url
from exporter.collectors.vllm.reading import redact_url
from exporter.host.paths import HostPaths, read_text
from exporter.model import CgroupRef, PodDirectory, PodInfo

ANNOTATION_VLLM_PORT = "headroom.io/vllm-port"
ANNOTATION_PROM_PORT = "prometheus.io/port"
ANNOTATION_PATH = "prometheus.io/path"
ANNOTATION_SCHEME = "prometheus.io/scheme"
MAX_FDS = 8192  # descriptors looked at per process
MAX_PROBES = 4  # ports probed per API server per pass (the rest wait for the next pass)
MAX_CANDIDATES = 64  # listening ports of one API server kept as candidates (the likeliest)


def read_listeners(procfs: str, pid: int, max_fds: int = MAX_FDS,
                   read_text: Callable[[str], str] | None = None,
                   listdir: Callable[[str], list[str]] = os.listdir,
                   readlink: Callable[[str], str] = os.readlink) -> list[ListenSocket]:
    """The TCP sockets ``pid`` listens on, as its network namespace's tables show them.
    Raises OSError when the process is gone or its fds cannot be read."""
    read = read_text or _read_text
    links = []
    for fd in listdir(f"{procfs}/{pid}/fd")[:max_fds]:
        try:
            links.append(readlink(f"{procfs}/{pid}/fd/{fd}"))
        except OSError:
            continue  # closed meanwhile
    if not any(link.startswith("socket:[") for link in links):
        return []
    tables: list[ListenSocket] = []
    for table in ("tcp", "tcp6"):
        try:
            tables += parse_listening(read(f"{procfs}/{pid}/net/{table}"))
        except FileNotFoundError:
            continue  # no IPv6 in that namespace
    return listening_of(links, tables)


def _read_text(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def _loopback_for(s: ListenSocket) -> str:
    ip = s.ip
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return "::1"
    return "127.0.0.1"


def reach(s: ListenSocket, *, same_netns: bool, pod_ips: Iterable[str]) -> str | None:
    """The address to connect to for listener ``s``, or None when the exporter cannot
    reach it from its own network namespace."""
    if same_netns:
        return _loopback_for(s) if s.wildcard or s.loopback_only else s.address
    if s.loopback_only:
        return None
    ips = [ip for ip in pod_ips if ip]
    if s.wildcard:
        fam6 = isinstance(s.ip, ipaddress.IPv6Address)
        for ip in ips:  # a v6 wildcard is dual-stack unless v6only: both families
            if fam6 or ":" not in ip:
                return ip
        return None
    bound = s.address.removeprefix("::ffff:")
    return bound if bound in ips else None


def annotation_ports(annotations: Mapping[str, str]) -> list[int]:
    out = []
    for key in (ANNOTATION_VLLM_PORT, ANNOTATION_PROM_PORT):
        raw = annotations.get(key, "").strip()
        if raw.isdigit() and 0 < int(raw) < 65536 and int(raw) not in out:
            out.append(int(raw))
    return out


@dataclass(frozen=True)
class Candidate:
    host: str
    port: int

    @property
    def hostport(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def candidates(listeners: Sequence[ListenSocket], *, same_netns: bool,
               pod_ips: Sequence[str], preferred: Sequence[int] = ()) -> list[Candidate]:
    """Reachable listeners of an API server, the annotated ports first, then by port."""
    out: dict[int, Candidate] = {}
    for s in sorted(listeners, key=lambda s: (s.port, s.address)):
        host = reach(s, same_netns=same_netns, pod_ips=pod_ips)
        if host is not None and s.port not in out:
            out[s.port] = Candidate(host, s.port)
    first = [out[p] for p in preferred if p in out]
    return first + [c for p, c in sorted(out.items()) if p not in preferred]


def looks_like_vllm(text: str) -> bool:
    """A Prometheus text body with vLLM's own families (``vllm:...``)."""
    for line in text.splitlines():
        if line.startswith("vllm:") or line.startswith(("# TYPE vllm:", "# HELP vllm:")):
            return True
    return False


# --- API servers and their targets -------------------------------------------------------


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
class LocatedServer:
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


def locate_server(cgroup: str, srv: ApiServer, pod_info: PodInfo | None,
                  paths: HostPaths, own_netns: int | None,
                  argv: Sequence[str] = (), pod: str = "",
                  pod_net: PodNetwork | None = None) -> LocatedServer:
    """Where API server ``srv`` listens, as reachable addresses. Raises OSError when its
    descriptors cannot be read (it exited, or no rights on /proc/PID/fd).

    Reachable only in our own network namespace or in the pod's (``pod_net``): an API
    server in a namespace of its own (``unshare -rn`` + ``ip addr add``) gets no
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
    return LocatedServer(cgroup, srv.pid, tuple(found), path, scheme, frozenset(ports),
                      tuple(argv), srv.engines, pod or cgroup)


def find_servers(
    refs: Sequence[CgroupRef],
    procfs_data: ProcfsData | None,
    pods: PodDirectory | None,
    paths: HostPaths,
) -> tuple[list[LocatedServer], list[str]]:
    """Every vLLM API server among the tracked processes, with where it listens; and the
    ones that cannot be looked at, as error lines."""
    servers: list[LocatedServer] = []
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
    for path, found in sorted(procfs_data.api_servers.items()):
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
                                             procfs_data.api_server_argv.get(path, ()),
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
