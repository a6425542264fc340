"""Real memory cgroups for tests, created beneath the test process's own cgroup only.

Shapes them like a kubelet's cgroupfs-driver tree
(``<own>/headroom-test-<n>/kubepods/burstable/pod<uid>/<container id>``) and runs a
*grower*: a child process placed in a container cgroup before it allocates anything,
driven by commands on its stdin:

    anon MiB        allocate and touch MiB of anonymous memory
    shm MiB NAME    write MiB into /dev/shm/NAME and close it (unmapped shmem)
    file MiB PATH   write MiB to a disk file, fsync, read it back twice (page cache)
    burst MiB MS    allocate MiB, hold it MS milliseconds, free it
    grow MiB MS     keep allocating MiB every MS milliseconds (until killed)
    free            drop all anonymous memory held
    name COMM       set the process's comm (what the kernel log names it by)
    spawn           fork a child that sleeps (a second process in the cgroup)
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exporter.host.paths import HostPaths, MemoryHierarchy, self_memory_cgroup

GROWER = r"""
import mmap, os, sys, time
held = []
def touch(mib):
    # MAP_PRIVATE: Python's default for -1 is a shared mapping, which is shmem
    m = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for off in range(0, mib << 20, 4096):
        m[off] = 1
    return m
print("ready", flush=True)
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "anon":
        held.append(touch(int(args[0])))
    elif cmd == "shm":
        with open("/dev/shm/" + args[1], "wb") as f:
            chunk = b"\1" * (1 << 20)
            for _ in range(int(args[0])):
                f.write(chunk)
    elif cmd == "file":
        chunk = b"\2" * (1 << 20)
        with open(args[1], "wb") as f:
            for _ in range(int(args[0])):
                f.write(chunk)
            f.flush(); os.fsync(f.fileno())
        for _ in range(2):  # twice: the second read moves the pages to the active list
            with open(args[1], "rb") as f:
                while f.read(1 << 20):
                    pass
    elif cmd == "burst":
        m = touch(int(args[0]))
        time.sleep(int(args[1]) / 1000)
        m.close()
    elif cmd == "grow":
        while True:
            held.append(touch(int(args[0])))
            time.sleep(int(args[1]) / 1000)
    elif cmd == "name":
        import ctypes
        ctypes.CDLL(None).prctl(15, args[0].encode(), 0, 0, 0)  # PR_SET_NAME
    elif cmd == "spawn":
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
    elif cmd == "free":
        for m in held:
            m.close()
        held.clear()
    print("ok", flush=True)
"""


class KernelUnavailable(Exception):
    pass


def own_memory_cgroup(paths: HostPaths | None = None) -> tuple[MemoryHierarchy, str]:
    """This process's memory cgroup, when tests may create memory cgroups beneath it.

    v1 (this machine's host): the cgroup must be writable. v2 (the QEMU guest of
    ``scripts/v2-guest.py``, or a delegated cgroup): children only get ``memory.*`` files
    when ``+memory`` is in the parent's ``cgroup.subtree_control``, and the kernel's
    no-internal-processes rule refuses that in a non-root cgroup that holds processes
    (the test's own, usually): then the tier is unavailable on this host and runs in
    the guest.
    """
    paths = paths or HostPaths()
    if os.geteuid() != 0:
        raise KernelUnavailable("needs root to create memory cgroups")
    try:
        h = paths.detect_memory_hierarchy()
    except Exception as exc:
        raise KernelUnavailable(f"no memory cgroup controller: {exc}") from exc
    own = self_memory_cgroup(paths.procfs)
    if not os.access(h.dir(own), os.W_OK):
        raise KernelUnavailable(f"own memory cgroup {h.dir(own)} is not writable")
    if h.version == 2:
        try:
            enable_memory(h.dir(own))
        except OSError as exc:
            raise KernelUnavailable(
                f"cgroup v2: cannot enable +memory in {h.dir(own)}/cgroup.subtree_control "
                f"({exc.strerror}: a non-root cgroup that holds processes cannot); run the "
                "tier in the v2 guest (scripts/v2-guest.py) or from a delegated cgroup"
            ) from exc
    return h, own


def need_kernel() -> None:
    """Skip the test unless the kernel tier can run here (a writable memory cgroup)."""
    try:
        own_memory_cgroup()
    except KernelUnavailable as exc:
        pytest.skip(str(exc))


def enable_memory(cgroup: Path) -> None:
    """v2: give the children of ``cgroup`` the memory controller (their memory.* files)."""
    control = cgroup / "cgroup.subtree_control"
    if "memory" not in control.read_text().split():
        control.write_text("+memory")


def limit_file(version: int) -> str:
    return "memory.max" if version == 2 else "memory.limit_in_bytes"


def oom_kills(hierarchy: MemoryHierarchy, rel: str) -> int:
    """The kernel's own kill counter of a cgroup, read the way a person would check it:
    v2 ``memory.events`` (hierarchical), v1 ``memory.oom_control`` (this cgroup only)."""
    name = "memory.events" if hierarchy.version == 2 else "memory.oom_control"
    for line in (hierarchy.dir(rel) / name).read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    raise AssertionError(f"no oom_kill in {hierarchy.dir(rel) / name}")


@dataclass
class KubeTree:
    hierarchy: MemoryHierarchy
    base: str  # <own>/headroom-test-<hex>
    made: list[Path] = field(default_factory=list)
    shm_files: list[Path] = field(default_factory=list)

    @property
    def version(self) -> int:
        return self.hierarchy.version

    @property
    def kubepods(self) -> str:
        return f"{self.base}/kubepods"

    def mkdir(self, rel: str) -> Path:
        d = self.hierarchy.dir(rel)
        for parent in reversed([d, *d.parents]):
            if parent == self.hierarchy.root or self.hierarchy.root not in parent.parents:
                continue
            if not parent.exists():
                if self.version == 2:
                    enable_memory(parent.parent)  # at every level, as a kubelet does
                parent.mkdir()
                self.made.append(parent)
        return d

    def set_limit(self, d: Path, limit: int) -> None:
        (d / limit_file(self.version)).write_text(str(limit))

    def staging(self) -> str:
        """A cgroup outside kubepods to start processes in before they enter a container
        (Python starts 30-70x slower under QEMU's TCG: seconds a container should not
        wait)."""
        rel = f"{self.base}/staging"
        self.mkdir(rel)
        return rel

    def pod(self, qos: str = "burstable", limit: int | None = None) -> tuple[str, str]:
        uid = str(uuid.uuid4())
        rel = f"{self.kubepods}/{qos}/pod{uid}" if qos != "guaranteed" else (
            f"{self.kubepods}/pod{uid}")
        d = self.mkdir(rel)
        if limit is not None:
            self.set_limit(d, limit)
        return uid, rel

    def container(self, pod_rel: str, limit: int | None = None) -> tuple[str, str]:
        cid = secrets.token_hex(32)
        rel = f"{pod_rel}/{cid}"
        d = self.mkdir(rel)
        if limit is not None:
            self.set_limit(d, limit)
        return cid, rel

    def remove(self, rel: str) -> None:
        """Remove an emptied container cgroup, as the runtime does after it exits."""
        d = self.hierarchy.dir(rel)
        for _ in range(100):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)  # the killed process is still being torn down
        if d in self.made:
            self.made.remove(d)

    def cleanup(self) -> None:
        for f in self.shm_files:
            f.unlink(missing_ok=True)
        for d in reversed(self.made):
            for _ in range(50):
                try:
                    for pid in (d / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), 9)
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


@contextmanager
def kube_tree() -> Iterator[KubeTree]:
    h, own = own_memory_cgroup()
    tree = KubeTree(h, f"{own}/headroom-test-{secrets.token_hex(4)}".strip("/"))
    try:
        yield tree
    finally:
        tree.cleanup()


class Grower:
    """A child process charged to a given cgroup from its first allocation."""

    def __init__(self, hierarchy: MemoryHierarchy, rel: str) -> None:
        procs = hierarchy.dir(rel) / "cgroup.procs"

        def enter_cgroup() -> None:
            procs.write_text(str(os.getpid()))

        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", GROWER], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, preexec_fn=enter_cgroup,
        )
        assert self.read() == "ready"

    def move(self, hierarchy: MemoryHierarchy, rel: str) -> None:
        """Into another cgroup: what it allocates from now on is charged there (a started
        interpreter entering a fresh container, as a runtime's init does)."""
        (hierarchy.dir(rel) / "cgroup.procs").write_text(str(self.proc.pid))

    def read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def send(self, command: str, wait: bool = True) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        if wait:
            reply = self.read()
            assert reply == "ok", f"grower answered {reply!r} to {command!r}"

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        end(self.proc)


def end(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` unless it has exited, reap it and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            f.close()


@contextmanager
def cpu_stress(workers: int = 2) -> Iterator[subprocess.Popen[bytes]]:
    """Every core this machine's CI has kept busy (``stress-ng --cpu 2``) while the body
    runs: what a loaded node does to the exporter's threads and to a dying process."""
    exe = shutil.which("stress-ng") or "stress-ng"
    proc = subprocess.Popen([exe, "--cpu", str(workers), "--timeout", "600s", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # its own group: the workers too
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
