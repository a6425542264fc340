"""Stale shared memory: files in a pod's tmpfs that no live process of the pod has open or
mapped. Parsers against a real /proc/<pid>/maps capture; the scan on the real kernel, in
a private mount namespace with its own /dev/shm tmpfs, as a container has."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from exporter.collectors.procfs import ProcfsData
from exporter.collectors.tmpfs import TmpfsData
from exporter.collectors.tmpfs_orphans import TmpfsOrphansSettings, TmpfsOrphansSource
from exporter.collectors.tmpfs_scan import (
    Listing,
    ProcReader,
    TmpfsFile,
    maps_tmpfs_ids,
    orphans,
    scan_pod,
    walk,
)
from exporter.model import CgroupRef, ProcessStatus, TmpfsMount

FIXTURES = Path(__file__).parents[1] / "fixtures" / "procnet"
T = TypeVar("T")


def test_maps_capture() -> None:
    """A real maps file: a /dev/shm file (0:27 inode 20), a memfd, a shared anonymous
    mapping (both on 0:1, the internal shmem mount) and the rest, all taken as they are."""
    ids = maps_tmpfs_ids((FIXTURES / "maps-shm.txt").read_bytes())
    assert (os.makedev(0, 27), 20) in ids
    assert (os.makedev(0, 1), 1134) in ids and (os.makedev(0, 1), 1135) in ids
    assert all(os.major(dev) == 0 and ino for dev, ino in ids)  # no anon, no disk files


@pytest.mark.parametrize(("text", "expected"), [
    (b"7ff2-7ff3 rw-s 00000000 00:1b 20        /dev/shm/x\n", {(os.makedev(0, 27), 20)}),
    (b"7ff2-7ff3 rw-s 00000000 00:1b 20        /dev/shm/with space (deleted)\n",
     {(os.makedev(0, 27), 20)}),
    (b"7ff2-7ff3 rw-p 00000000 00:00 0 \n", set()),  # anonymous
    (b"5601-5602 r--p 00000000 fe:00 260131     /usr/bin/cat\n", set()),  # a disk file
    (b"garbage\n\x00\xff 00:zz 1\n", set()),
    (b"", set()),
])
def test_maps_lines(text: bytes, expected: set[tuple[int, int]]) -> None:
    assert maps_tmpfs_ids(text) == expected


def test_orphans_largest_first() -> None:
    a, b, c = (TmpfsFile(n, (9, i), size) for i, (n, size) in
               enumerate([("a", 4096), ("big", 1 << 20), ("held", 8192)]))
    o = orphans("/dev/shm", Listing((a, b, c), True), held={(9, 2)})
    assert (o.bytes, o.files, o.complete) == ((1 << 20) + 4096, ("big", "a"), True)


def test_walk_bounds(tmp_path: Path) -> None:
    (tmp_path / "d1" / "d2" / "d3").mkdir(parents=True)
    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(b"x" * 5000)
    (tmp_path / "d1" / "d2" / "d3" / "deep").write_bytes(b"y")
    (tmp_path / "link").symlink_to("/etc/passwd")  # never followed
    os.mkfifo(tmp_path / "fifo")  # not a regular file
    full = walk(str(tmp_path))
    assert full.complete and sorted(f.path for f in full.files) == [
        "d1/d2/d3/deep", "f0", "f1", "f2", "f3", "f4"]
    assert all(f.bytes >= 5000 for f in full.files if f.path.startswith("f"))
    shallow = walk(str(tmp_path), max_depth=2)
    assert not shallow.complete and "d1/d2/d3/deep" not in {f.path for f in shallow.files}
    few = walk(str(tmp_path), max_files=3)
    assert not few.complete and len(few.files) <= 3
    assert walk(str(tmp_path / "gone")) == Listing((), True)


# --- the real kernel ---------------------------------------------------------------------

# A "pod": a process in its own mount namespace with a private tmpfs on /dev/shm (what a
# container runtime gives a pod), which stays alive as the pod's sandbox.
SANDBOX = "mount -t tmpfs -o size=64m tmpfs /dev/shm && echo ready && exec sleep 600"

# vLLM's offload region, as a worker holds it: created, sized, mapped, fd closed
MAPPER = r"""
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, int(sys.argv[2]))
m = mmap.mmap(fd, int(sys.argv[2]))
os.close(fd)
for off in range(0, len(m), 4096):
    m[off] = 1
held = open(sys.argv[3], "wb")  # another file, open but never mapped
held.write(b"z" * 65536); held.flush()
print("ready", flush=True)
time.sleep(600)
"""


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        "mount -t tmpfs tmpfs /dev/shm"], capture_output=True)
    return r.returncode == 0


class Pod:
    """A sandbox process with its own mount namespace and /dev/shm; with ``cgroup_procs``,
    it and every process run in it are charged to that (container) cgroup."""

    def __init__(self, cgroup_procs: Path | None = None) -> None:
        self.cgroup_procs = cgroup_procs
        self.sandbox = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", SANDBOX],
            stdout=subprocess.PIPE, text=True, preexec_fn=self._enter)
        assert self.sandbox.stdout is not None
        assert self.sandbox.stdout.readline().strip() == "ready"
        self.pid = self._sleep_pid()
        self.root = f"/proc/{self.pid}/root/dev/shm"
        self.children: list[subprocess.Popen[str]] = []

    def _sleep_pid(self) -> int:
        for _ in range(50):
            comm = Path(f"/proc/{self.sandbox.pid}/comm").read_text().strip()
            if comm == "sleep":  # sh exec'd it: same pid
                return self.sandbox.pid
            time.sleep(0.02)
        raise AssertionError("sandbox did not start")

    def _enter(self) -> None:
        if self.cgroup_procs is not None:  # in the child, before exec
            self.cgroup_procs.write_text(str(os.getpid()))

    def run(self, code: str, *args: str) -> subprocess.Popen[str]:
        """A process of the pod: joins the sandbox's mount namespace (and cgroup)."""
        p = subprocess.Popen(["nsenter", "-t", str(self.pid), "-m", sys.executable, "-c",
                              code, *args], stdout=subprocess.PIPE, text=True,
                             preexec_fn=self._enter)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        self.children.append(p)
        return p

    def pids(self) -> list[int]:
        return [self.pid] + [p.pid for p in self.children if p.poll() is None]

    def scan(self) -> int:
        (o,) = scan_pod({"/dev/shm": self.root}, self.pids(), ProcReader(), walk)
        return o.bytes

    def close(self) -> None:
        for p in [*self.children, self.sandbox]:
            if p.poll() is None:
                p.kill()
            p.wait(10)
            if p.stdout is not None:
                p.stdout.close()


@pytest.fixture
def pod() -> Iterator[Pod]:
    if not _can_unshare():
        pytest.skip("needs root, unshare and nsenter to give the pod its own /dev/shm")
    p = Pod()
    try:
        yield p
    finally:
        p.close()


def test_a_sigkilled_process_leaves_orphaned_bytes(pod: Pod) -> None:
    size = 8 << 20
    mapper = pod.run(MAPPER, "/dev/shm/vllm_offload_0.mmap", str(size), "/dev/shm/held.bin")
    assert pod.scan() == 0  # mapped and open: in use
    os.kill(mapper.pid, signal.SIGKILL)
    mapper.wait(10)
    assert pod.scan() == size + 65536  # the region and the open-only file, both left
    os.unlink(f"{pod.root}/vllm_offload_0.mmap")
    os.unlink(f"{pod.root}/held.bin")
    assert pod.scan() == 0


def test_held_by_another_process_of_the_pod(pod: Pod) -> None:
    """A second process maps the region (vLLM's workers share it): killing the creator
    orphans nothing while the other one lives."""
    size = 1 << 20
    first = pod.run(MAPPER, "/dev/shm/region", str(size), "/dev/shm/a")
    second = pod.run(MAPPER, "/dev/shm/region", str(size), "/dev/shm/b")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    assert pod.scan() == 65536  # only "a", which only the dead one had open
    os.kill(second.pid, signal.SIGKILL)
    second.wait(10)
    assert pod.scan() == size + 2 * 65536


def test_no_shm_no_cost(pod: Pod, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty /dev/shm: no process is looked at."""
    looked: list[int] = []
    reader = ProcReader()

    def fd_ids(pid: int) -> set[tuple[int, int]]:
        looked.append(pid)
        return set()

    monkeypatch.setattr(reader, "fd_ids", fd_ids)
    (o,) = scan_pod({"/dev/shm": pod.root}, pod.pids(), reader, walk)
    assert o.bytes == 0 and looked == []




# --- through a real headroom serve, on a kube-shaped cgroup -----------------------------


def test_orphaned_bytes_through_the_exporter(tmp_path: Path) -> None:
    """A pod (its own /dev/shm, its processes in a container cgroup) whose process is
    SIGKILLed while it maps vLLM's offload region: the exporter shows the left file as
    orphaned bytes on the pod, and 0 once the file is removed; the scan's cost is the
    collector's duration."""
    if not _can_unshare():
        pytest.skip("needs root, unshare and nsenter to give the pod its own /dev/shm")
    from tests.helpers.kernel import KernelUnavailable, kube_tree, own_memory_cgroup
    from tests.unit.test_vllm_hostile import exporter

    try:
        own_memory_cgroup()
    except KernelUnavailable as exc:
        pytest.skip(f"kernel tier unavailable: {exc}")

    size = 16 << 20
    with kube_tree() as tree:
        uid, pod_rel = tree.pod("burstable", limit=1 << 30)
        _, ctr_rel = tree.container(pod_rel)
        procs = tree.hierarchy.dir(ctr_rel) / "cgroup.procs"
        pod = Pod(procs)
        try:
            mapper = pod.run(MAPPER, "/dev/shm/vllm_offload_0.mmap", str(size),
                             "/dev/shm/held.bin")
            with exporter(tmp_path, "--cgroup.kubepods-path", tree.kubepods,
                          "--cgroup.host-vllm=false", "--no-collector.vllm") as ex:
                def orphaned() -> tuple[float | None, float | None, float | None]:
                    samples = ex.samples()
                    pick = {(n, lab.get("pod"), lab.get("collector")): v
                            for n, lab, v in samples}
                    return (pick.get(("headroom_tmpfs_orphaned_bytes", uid, None)),
                            pick.get(("headroom_tmpfs_used_bytes", uid, None)),
                            pick.get(("headroom_collector_duration_seconds", None,
                                      "tmpfs_orphans")))

                held, used, _ = orphaned()
                assert held == 0 and used is not None and used >= size, (held, used)
                os.kill(mapper.pid, signal.SIGKILL)
                mapper.wait(10)
                left = wait_for(orphaned, lambda o: o[0] == size + 65536)
                os.unlink(f"{pod.root}/vllm_offload_0.mmap")
                os.unlink(f"{pod.root}/held.bin")
                gone = wait_for(orphaned, lambda o: o[0] == 0)
            print(f"\norphaned bytes after SIGKILL: {left[0]:.0f} (scan {left[2]:.4f} s); "
                  f"after removal: {gone[0]:.0f} (scan {gone[2]:.4f} s)")
        finally:
            pod.close()


def wait_for(read: Callable[[], T], ok: Callable[[T], bool], timeout: float = 20.0) -> T:
    end = time.monotonic() + timeout
    while True:
        value = read()
        if ok(value) or time.monotonic() > end:
            assert ok(value), value
            return value
        time.sleep(0.3)


def test_a_directory_swapped_for_a_symlink_mid_walk_is_not_followed(
        tmp_path: Path) -> None:
    """The walk did ``lstat`` then ``scandir`` by path, so a pod could swap a
    directory for a symbolic link in between and the walk listed what the link named
    (the exporter's own root, with an absolute link). Here the swap happens right after
    the mount's top directory is listed, before the descent (docs/threats.md:
    tmpfs-symlink-swap)."""
    mount, outside = tmp_path / "shm", tmp_path / "outside"
    (mount / "d").mkdir(parents=True)
    (mount / "d" / "inside").write_bytes(b"x")
    outside.mkdir()
    (outside / "secret").write_bytes(b"y")
    listed: list[object] = []

    @contextmanager
    def swapping_scandir(where: int | str) -> Iterator[Iterator[os.DirEntry[str]]]:
        with os.scandir(where) as it:
            entries = list(it)
        first = not listed
        listed.append(where)
        yield iter(entries)
        if first:  # the pod's move, between the listing and the descent
            (mount / "d").rename(mount / "d.old")
            (mount / "d").symlink_to(outside)

    found = walk(str(mount), scandir=swapping_scandir)
    assert "d/secret" not in {f.path for f in found.files}
    assert len(listed) == 1  # the link was not descended into


# --- the budget (docs/threats.md: tmpfs-scan-budget) -------------------------------------

POD, CTR = "kubepods/podX", "kubepods/podX/c1"


class CountingReader:
    """/proc of a pod with ``procs`` processes of ``fds`` descriptors each, none holding
    the pod's files (so a scan must look at all of them): counts the stats."""

    def __init__(self, procs: int, fds: int) -> None:
        self.fd_names = [str(i) for i in range(fds)]
        self.stats = 0
        self.pids = list(range(1000, 1000 + procs))

    def listdir(self, path: str) -> list[str]:
        return self.fd_names

    def stat(self, path: str) -> os.stat_result:
        self.stats += 1
        return os.stat_result((0o100600, 1, 99, 1, 0, 0, 0, 0, 0, 0))

    def reader(self, procfs: str) -> ProcReader:
        return ProcReader(procfs=procfs, listdir=self.listdir, stat=self.stat,
                          read_bytes=lambda p: b"")


def _orphan_source(tmp_path: Path, reader: ProcReader) -> TmpfsOrphansSource:
    from exporter.host.paths import HostPaths

    src = TmpfsOrphansSource(TmpfsOrphansSettings(), HostPaths(procfs=tmp_path / "proc",
                                                              cgroupfs=tmp_path / "cg"))
    src._reader = reader  # the fixture's /proc for descriptors and maps
    return src


def test_a_huge_pod_whose_usage_moves_is_scanned_within_the_budget(
        tmp_path: Path) -> None:
    """A pod with 1,000 processes x 300 descriptors whose tmpfs "used" moves every
    second was rescanned in full on every scrape (3-5 s; 3/12 scrapes timed out), and the
    budget did not bound the first pod. Now each scrape spends at most the budget (plus
    one process's descriptors), the scan goes on where it stopped, the pod keeps its last
    figure marked stale meanwhile, and a finished scan gives the orphaned bytes
    (docs/threats.md: tmpfs-scan-budget)."""
    counting = CountingReader(procs=1000, fds=300)
    shm = tmp_path / "proc" / str(counting.pids[0]) / "root" / "dev" / "shm"
    shm.mkdir(parents=True)
    for i in range(5):
        (shm / f"psm_{i}").write_bytes(b"x" * 8192)
    src = _orphan_source(tmp_path, counting.reader(str(tmp_path / "proc")))
    refs = [CgroupRef(POD, pod_uid="X"), CgroupRef(CTR, pod_uid="X", container_id="c1")]
    pf = ProcfsData(groups={}, processes={
        CTR: tuple(ProcessStatus(p, "python", 0, 0, 0, 0) for p in counting.pids)})
    budget = TmpfsOrphansSettings().budget
    figures, stale_scrapes = [], 0
    for second in range(25):  # one scrape a second, the usage moving every time
        tf = TmpfsData({POD: (TmpfsMount("/dev/shm", 40960 + second, 1 << 26),)})
        before = counting.stats
        r = src.read(refs, pf, tf)
        assert counting.stats - before <= budget + 300, "one scrape passed the budget"
        assert r.data is not None
        stale_scrapes += POD in r.data.stale
        if POD in r.data.orphans and POD not in r.data.stale:
            figures.append(r.data.orphans[POD]["/dev/shm"])
        elif POD in r.data.orphans:
            figures.append(-1)
    assert stale_scrapes > 0 and figures, (stale_scrapes, figures)
    done = [f for f in figures if f != -1]
    assert done and all(f == len(list(shm.iterdir())) * 8192 for f in done)
