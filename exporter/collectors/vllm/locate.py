"""Where a local vLLM serves /metrics, from what the kernel shows, never from a command line.

A vLLM engine is a process tree: ``VLLM::EngineCore*`` / ``VLLM::Worker*`` processes
under an API server, whatever started it (``vllm serve``, KServe's huggingfaceserver, a
Ray or in-house launcher, a Rust front end): see ``proctree``. The API server's listening
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

Why not the command line (F10): any process can write any ``--host``/``--port`` in its
argv, and the exporter (root, on every node) would send requests wherever it says. The
kernel's socket table says where a process really listens, and a process can bind only
addresses of its own namespace.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from exporter.collectors.sockets import ListenSocket, listening_of, parse_listening

ANNOTATION_VLLM_PORT = "headroom.io/vllm-port"
ANNOTATION_PROM_PORT = "prometheus.io/port"
MAX_FDS = 8192  # descriptors looked at per process
MAX_PROBES = 4  # ports probed per API server per pass (the rest wait for the next pass)


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


def netns(procfs: str, pid: int | str) -> int | None:
    """Inode of a process's network namespace (None when it cannot be read)."""
    try:
        return os.stat(f"{procfs}/{pid}/ns/net").st_ino
    except OSError:
        return None


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
