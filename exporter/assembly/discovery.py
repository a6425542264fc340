"""Which cgroups to track on this scrape: every pod and container under the kubepods
cgroup, the ``--cgroup.track`` ones, and the cgroups of vLLM processes found on the host
outside Kubernetes (by command line, rescanned every ``HOST_SCAN_INTERVAL``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.collectors.procfacts import CMDLINE_MAX_BYTES, split_cmdline
from exporter.collectors.vllm.identity import is_vllm_cmdline
from exporter.host.paths import (
    CgroupLayoutError,
    HostPaths,
    MemoryHierarchy,
    cgroupns_root,
    read_bytes,
    resolve_cgroup,
    self_memory_cgroup,
)
from exporter.host.workloads import dedupe, find_kubepods, tracked_refs, walk_kubepods
from exporter.model import CgroupRef

log = logging.getLogger(__name__)

HOST_SCAN_INTERVAL = 30.0  # seconds between scans of /proc for vLLM command lines


@dataclass(frozen=True)
class Discovered:
    hierarchy: MemoryHierarchy
    refs: tuple[CgroupRef, ...]


def scan_vllm_processes(paths: HostPaths, ns_root: str | None = None) -> dict[str, list[int]]:
    """vLLM processes on the host by command line -> their memory cgroups (resolved
    against our cgroup namespace's root, see paths.cgroupns_root)."""
    found: dict[str, list[int]] = {}
    try:
        entries = [e for e in paths.procfs.iterdir() if e.name.isdigit()]
    except OSError:
        return found
    for entry in entries:
        try:
            argv = split_cmdline(read_bytes(entry / "cmdline", limit=CMDLINE_MAX_BYTES))
            if not is_vllm_cmdline(argv):
                continue
            cgroup = resolve_cgroup(self_memory_cgroup(paths.procfs, entry.name), ns_root)
        except (OSError, CgroupLayoutError):
            continue  # exited, or a kernel thread
        found.setdefault(cgroup, []).append(int(entry.name))
    return found


class Discovery:
    """Blocking (it walks cgroupfs): called from a worker thread, one at a time."""

    def __init__(self, paths: HostPaths, kubepods_path: str | None, track: tuple[str, ...],
                 clock: Callable[[], float] = time.monotonic, host_vllm: bool = True) -> None:
        self._paths = paths
        self._kubepods = kubepods_path
        self._track = track
        self._host_vllm_scan = host_vllm  # --cgroup.host-vllm
        self._clock = clock
        self._hierarchy: MemoryHierarchy | None = None
        self._host_scan_at = -1e18
        self._host_vllm: dict[str, list[int]] = {}
        self._cgroupns: tuple[str | None] | None = None

    def hierarchy(self) -> MemoryHierarchy:
        """Detected once; until then every scrape tries again (CgroupLayoutError)."""
        if self._hierarchy is None:
            h = self._paths.detect_memory_hierarchy()
            log.info("memory cgroup controller: v%d at %s", h.version, h.root)
            self._hierarchy = h
        return self._hierarchy

    def watch_root(self) -> tuple[MemoryHierarchy, str | None]:
        """Where the sampler watches for new cgroups between scrapes: the hierarchy and
        the kubepods cgroup (configured, else found; None when there is none yet)."""
        h = self.hierarchy()
        kubepods = self._kubepods if self._kubepods is not None else find_kubepods(h)
        return h, kubepods.strip("/") if kubepods is not None else None

    def _ns_root(self, h: MemoryHierarchy) -> str | None:
        """Our cgroup namespace root, found once and said once (paths.cgroupns_root)."""
        if self._cgroupns is None:
            root = cgroupns_root(self._paths.procfs, h)  # CgroupLayoutError: discovery fails
            if root is not None:
                log.warning("headroom runs in its own cgroup namespace, rooted at /%s: "
                            "host processes' cgroup paths are resolved against it", root)
            self._cgroupns = (root,)
        return self._cgroupns[0]

    def discover(self) -> Discovered:
        h = self.hierarchy()
        kubepods = self._kubepods if self._kubepods is not None else find_kubepods(h)
        refs: list[CgroupRef] = []
        if kubepods is not None:
            kubepods = kubepods.strip("/")
            if not h.dir(kubepods).is_dir():
                raise FileNotFoundError(f"kubepods cgroup {h.dir(kubepods)} does not exist")
            refs.extend(walk_kubepods(h, kubepods))
        now = self._clock()
        if self._host_vllm_scan and now - self._host_scan_at >= HOST_SCAN_INTERVAL:
            self._host_scan_at = now
            self._host_vllm = scan_vllm_processes(self._paths, self._ns_root(h))
        outside = [cg for cg in self._host_vllm
                   if kubepods is None or not (cg + "/").startswith(kubepods + "/")]
        refs.extend(tracked_refs([*self._track, *outside]))
        return Discovered(h, tuple(dedupe(refs)))
