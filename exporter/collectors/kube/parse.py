"""Pure parts of the Kubernetes pod watcher: pod objects -> ``PodInfo``, watch-stream
lines -> events, the line splitter with its size cap, backoff and the in-cluster URL."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from exporter.model import ContainerInfo, PodInfo

# One watch line is one whole pod object; real ones are a few KiB to ~1 MiB (the
# apiserver caps an object at ~1.5 MiB in etcd). Anything larger is not a pod we want.
MAX_LINE_BYTES = 4 * 1024 * 1024

# Big and useless for naming: not worth keeping in memory for every pod.
_DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})

# Status lists that carry container IDs; ephemeral ones are `kubectl debug` containers.
_STATUS_KEYS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")



def strip_container_id(container_id: str) -> str:
    """``containerd://<hex>`` (or ``cri-o://``, ``docker://``) -> ``<hex>``.

    The cgroup path carries the bare id, so that is what the join compares.
    """
    _, sep, rest = container_id.strip().partition("://")
    return (rest if sep else container_id.strip()).lower()


def normalize_uid(pod_uid: str) -> str:
    """The API's UID form: systemd cgroup names write the dashes of a UID as ``_``."""
    return pod_uid.strip().lower().replace("_", "-")


def as_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _ports_by_container(spec: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    # initContainers too: native sidecars (restartPolicy: Always, e.g. istio-proxy) serve.
    out: dict[str, tuple[int, ...]] = {}
    for key in ("containers", "initContainers"):
        for c in as_list(spec.get(key)):
            c = as_mapping(c)
            name = as_str(c.get("name"))
            ports: list[int] = []
            for p in as_list(c.get("ports")):
                port = as_mapping(p).get("containerPort")
                # bool is an int in Python: exclude it explicitly.
                if (
                    isinstance(port, int)
                    and not isinstance(port, bool)
                    and 0 < port < 65536
                    and port not in ports
                ):
                    ports.append(port)
            if name:
                out[name] = tuple(ports)
    return out


def parse_pod(obj: Mapping[str, Any]) -> PodInfo | None:
    """A v1 Pod object (from a LIST item or a watch event) -> PodInfo.

    Tolerates any missing or null field; returns None only without a ``metadata.uid``.
    Container statuses without a ``containerID`` (not created yet) are skipped.
    """
    meta = as_mapping(obj.get("metadata"))
    uid = as_str(meta.get("uid"))
    if not uid:
        return None
    spec = as_mapping(obj.get("spec"))
    status = as_mapping(obj.get("status"))
    ports = _ports_by_container(spec)
    containers: list[ContainerInfo] = []
    seen: set[str] = set()
    for key in _STATUS_KEYS:
        for st in as_list(status.get(key)):
            st = as_mapping(st)
            name = as_str(st.get("name"))
            cid = strip_container_id(as_str(st.get("containerID")))
            if not name or not cid or cid in seen:
                continue
            seen.add(cid)
            containers.append(ContainerInfo(name=name, container_id=cid, ports=ports.get(name, ())))
    annotations = {
        k: v
        for k, v in as_mapping(meta.get("annotations")).items()
        if isinstance(k, str) and isinstance(v, str) and k not in _DROPPED_ANNOTATIONS
    }
    return PodInfo(
        uid=normalize_uid(uid),
        namespace=as_str(meta.get("namespace")),
        name=as_str(meta.get("name")),
        containers=tuple(containers),
        # Read-only view: PodInfo is shared with scrape threads.
        annotations=MappingProxyType(annotations),
        pod_ip=as_str(status.get("podIP")),
    )


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    object: Mapping[str, Any]


def decode_watch_event(line: bytes | str) -> WatchEvent:
    """One line of a watch stream -> WatchEvent. Raises ValueError on anything else."""
    try:
        doc = json.loads(line)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object but {type(doc).__name__}")
    etype, obj = doc.get("type"), doc.get("object")
    if not isinstance(etype, str) or not isinstance(obj, dict):
        raise ValueError("no 'type' string or no 'object' object")
    return WatchEvent(etype, obj)


class LineSplitter:
    """Splits a byte stream into lines; lines over ``max_bytes`` are dropped and counted.

    aiohttp's own readline() fails on long lines (and its limit is 128 KiB), and a
    pod object can be larger than that; here one oversized line costs one event, not
    the stream.
    """

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_bytes
        self._buf = bytearray()
        self._skipping = False  # inside an oversized line: drop bytes up to its newline
        self.skipped = 0

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        while (nl := data.find(b"\n", start)) >= 0:
            piece = data[start:nl]
            if self._skipping:
                self._skipping = False
            elif len(self._buf) + len(piece) > self._max:
                self.skipped += 1
            else:
                self._buf += piece
                line = bytes(self._buf).strip()
                if line:
                    out.append(line)
            self._buf.clear()
            start = nl + 1
        rest = data[start:]
        if self._skipping:
            pass
        elif len(self._buf) + len(rest) > self._max:
            self._skipping = True
            self.skipped += 1
            self._buf.clear()
        else:
            self._buf += rest
        return out

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line (a stream that ends here was cut mid-event)."""
        return len(self._buf)


def backoff_delay(
    failures: int, initial: float, cap: float, jitter: float,
    rand: Callable[[], float] = random.random,
) -> float:
    """Exponential backoff after ``failures`` consecutive failures (>= 1), capped.

    Jitter only shortens the delay, so it never exceeds ``cap``, and a DaemonSet's
    pods do not all retry in the same instant after an apiserver restart.
    """
    base = min(cap, initial * 2.0 ** max(0, failures - 1))
    return max(0.0, base * (1.0 - jitter * rand()))


def api_url_from_env(environ: Mapping[str, str]) -> str | None:
    """The in-cluster API URL from ``KUBERNETES_SERVICE_HOST``/``_PORT``, or None."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = environ.get("KUBERNETES_SERVICE_PORT", "").strip()
    if not host or not port:
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal needs brackets in a URL
    return f"https://{host}:{port}"
