"""Which cgroups to track, and the workload labels of each.

Kubernetes pods are found by walking the kubepods cgroup tree. Real path shapes
(memory controller root omitted), all handled by ``classify``:

    cgroupfs driver        kubepods/burstable/pod<uid>/<64 hex>
                           kubepods/pod<uid>/<64 hex>                      (Guaranteed)
                           kubepods/besteffort/pod<uid>/crio-<64 hex>      (CRI-O)
    systemd driver         kubepods.slice/kubepods-burstable.slice/
                             kubepods-burstable-pod<uid with _>.slice/cri-containerd-<hex>.scope
                           kubepods.slice/kubepods-pod<uid>.slice/crio-<hex>.scope
                           .../docker-<hex>.scope
    nested (kind, k3d)     kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/
                             kubelet-kubepods-besteffort-pod<uid>.slice/cri-containerd-<hex>.scope
                           docker/<node id>/kubepods/burstable/pod<uid>/<hex>

CRI-O's ``crio-conmon-<id>.scope`` (the container monitor) is not a container and is skipped.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from exporter.host.labels import bounded_unique
from exporter.host.paths import MemoryHierarchy
from exporter.model import CgroupRef, PodDirectory, Workload

log = logging.getLogger(__name__)

_POD_RE = re.compile(
    r"^(?:[a-z0-9-]*-)?pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}"
    r"[-_][0-9a-f]{12})(?:\.slice)?$"
)
_CONTAINER_RE = re.compile(
    r"^(?:(?P<runtime>cri-containerd|crio|docker|containerd|cri-o)-)?(?P<id>[0-9a-f]{64})"
    r"(?:\.scope)?$"
)
_QOS_RE = re.compile(r"(?:^|-)(?P<qos>burstable|besteffort)(?:\.slice)?$")
_KUBEPODS_NAMES = ("kubepods", "kubepods.slice", "kubelet-kubepods.slice")
_RUNTIMES = {
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "crio": "cri-o",
    "cri-o": "cri-o",
    "docker": "docker",
}


@dataclass(frozen=True)
class PodCgroup:
    uid: str
    qos: str


def parse_pod_dir(name: str, parent_qos: str | None) -> PodCgroup | None:
    m = _POD_RE.match(name)
    if not m:
        return None
    uid = m.group("uid").replace("_", "-")
    qos = parent_qos or "guaranteed"
    q = re.search(r"-(burstable|besteffort)-pod", name)
    if q:
        qos = q.group(1)
    return PodCgroup(uid, qos)


def parse_container_dir(name: str) -> tuple[str, str | None] | None:
    """(container id, runtime) of a container cgroup directory name, or None."""
    if name.startswith("crio-conmon-"):
        return None
    m = _CONTAINER_RE.match(name)
    if not m:
        return None
    runtime = m.group("runtime")
    return m.group("id"), (_RUNTIMES[runtime] if runtime else None)


def classify(rel_path: str) -> CgroupRef | None:
    """A cgroup path (relative to the memory root) -> what it is in Kubernetes, if anything.

    The pod directory is the last component that looks like one; a container is the
    component right below it.
    """
    parts = [p for p in rel_path.strip("/").split("/") if p]
    qos: str | None = None
    for i, name in enumerate(parts):
        q = _QOS_RE.search(name)
        if q and not _POD_RE.match(name):
            qos = q.group("qos")
        pod = parse_pod_dir(name, qos)
        if pod is None:
            continue
        rest = parts[i + 1 :]
        if not rest:
            return CgroupRef(path="/".join(parts), pod_uid=pod.uid, qos=pod.qos)
        if len(rest) == 1:
            container = parse_container_dir(rest[0])
            if container is None:
                return None
            cid, runtime = container
            return CgroupRef(
                path="/".join(parts), pod_uid=pod.uid, container_id=cid,
                runtime=runtime, qos=pod.qos,
            )
        return None  # deeper than a container (e.g. systemd inside a container)
    return None


def find_kubepods(hierarchy: MemoryHierarchy, max_depth: int = 4, max_dirs: int = 5000) -> (
    str | None
):
    """Auto-detect the kubepods root: breadth-first, bounded, nearest match wins."""
    queue: list[tuple[str, int]] = [("", 0)]
    visited = 0
    while queue:
        rel, depth = queue.pop(0)
        try:
            entries = sorted(e.name for e in os.scandir(hierarchy.dir(rel)) if e.is_dir())
        except OSError:
            continue
        for name in entries:
            child = f"{rel}/{name}" if rel else name
            if name in _KUBEPODS_NAMES:
                return child
            visited += 1
            if visited > max_dirs:
                return None
            if depth + 1 < max_depth and not name.startswith("pod"):
                queue.append((child, depth + 1))
    return None


def walk_kubepods(hierarchy: MemoryHierarchy, kubepods_rel: str) -> list[CgroupRef]:
    """Every pod and container cgroup under the kubepods root (QoS levels included)."""
    refs: list[CgroupRef] = []

    def subdirs(rel: str) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(hierarchy.dir(rel)) if e.is_dir())
        except OSError:
            return []  # a pod vanishing mid-walk is normal

    def visit_pod(rel: str, name: str, qos: str | None) -> None:
        # Built from the names directly: classify() on every path costs 5x more.
        pod = parse_pod_dir(name, qos)
        if pod is None:
            return
        refs.append(CgroupRef(path=rel, pod_uid=pod.uid, qos=pod.qos))
        for child in subdirs(rel):
            container = parse_container_dir(child)
            if container is not None:
                refs.append(CgroupRef(path=f"{rel}/{child}", pod_uid=pod.uid,
                                      container_id=container[0], runtime=container[1],
                                      qos=pod.qos))

    for name in subdirs(kubepods_rel):
        rel = f"{kubepods_rel}/{name}"
        if _POD_RE.match(name):
            visit_pod(rel, name, None)
        elif q := _QOS_RE.search(name):
            for pod_name in subdirs(rel):
                visit_pod(f"{rel}/{pod_name}", pod_name, q.group("qos"))
    return refs


def tracked_refs(paths: Iterable[str]) -> list[CgroupRef]:
    """Cgroups named by --cgroup.track or found around vLLM processes (outside kubepods)."""
    out: list[CgroupRef] = []
    seen: set[str] = set()
    for p in paths:
        rel = p.strip("/")
        k8s = classify(rel)
        ref = k8s if k8s is not None else CgroupRef(path=rel)
        if ref.path not in seen:
            seen.add(ref.path)
            out.append(ref)
    return out


def workload_of(ref: CgroupRef, pods: PodDirectory | None) -> Workload:
    """The contract's labels for a cgroup, with the fallback when names are unknown."""
    if ref.pod_uid is None:
        # A path anyone who can create a cgroup chose: bounded, escaped, still unique.
        return Workload("", bounded_unique("/" + ref.path), "")
    info = pods.lookup(ref.pod_uid) if pods is not None else None
    short = ref.container_id[:12] if ref.container_id else ""
    if info is None:
        return Workload("", ref.pod_uid, short)
    if ref.container_id is None:
        return Workload(info.namespace, info.name, "")
    return Workload(info.namespace, info.name, info.container_name(ref.container_id) or short)


def dedupe(refs: Sequence[CgroupRef]) -> list[CgroupRef]:
    seen: set[str] = set()
    out = []
    for r in refs:
        if r.path not in seen:
            seen.add(r.path)
            out.append(r)
    return out
