"""Hostile processes on the real kernel, read by a real ``headroom serve`` process:
a whitespace argv[0], 128 KB process names, a zombie leader, 1,100 processes at a
1,024-fd limit, a non-UTF-8 cgroup name, a cgroup namespace of its own (docs/threats.md:
blank-argv0, huge-process-names, zombie-leader, fd-exhaustion, non-utf8-cgroup,
own-cgroup-namespace). Cgroups are made
beneath the test's own cgroup (tests/helpers/kernel.py); every healthy pod must keep its series."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.conftest import parse_exposition
from tests.helpers.hostile import SLOW, http_get, serve
from tests.helpers.kernel import KubeTree

pytestmark = pytest.mark.kernel

LABEL_MAX = 131  # 128 characters and the "..." marker
ZOMBIE_LEADER = """
import threading, time, ctypes
threading.Thread(target=lambda: time.sleep(600)).start()
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: the main thread alone; the leader is a zombie
"""


class Procs:
    """Processes started in a cgroup, killed afterwards."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, tree: KubeTree, rel: str, argv: Sequence[str],
              executable: str | None = None) -> subprocess.Popen[bytes]:
        procs_file = tree.hierarchy.dir(rel) / "cgroup.procs"

        def enter() -> None:
            procs_file.write_text(str(os.getpid()))

        p = subprocess.Popen(list(argv), executable=executable, preexec_fn=enter,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait(timeout=10)


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.close()


def real_args(tree: KubeTree, *extra: str, host_scan: bool = False) -> list[str]:
    """``host_scan``: the scan of the host's /proc for vLLM processes, for the tests of
    that scan only (it then finds this machine's vLLMs too: their cgroups' series, which
    those tests do not read; the vLLM collector is off, so nothing is probed).
    A generous collector timeout: these tests check what a hostile node does to the
    figures, not how fast a loaded (or emulated) machine reads them; a first scrape of a
    busy guest took 5.02 s against the default 5 s."""
    return [f"--cgroup.kubepods-path={tree.kubepods}", "--no-collector.kubernetes",
            f"--collector.timeout={round(30 * SLOW)}s",
            f"--cgroup.host-vllm={str(host_scan).lower()}",
            "--no-collector.nvml", "--no-collector.vllm", "--path.kmsg=", *extra]


def scrape(url: str) -> tuple[str, dict[str, float]]:
    status, _, body = http_get(url + "/metrics", timeout=30)
    assert status == 200
    text = body.decode()
    return text, parse_exposition(text)


def series(values: dict[str, float], name: str, **labels: str) -> list[float]:
    return [v for k, v in values.items() if k.startswith(name + "{")
            and all(f'{lk}="{lv}"' in k for lk, lv in labels.items())]


def success(values: dict[str, float], collector: str) -> float:
    (v,) = series(values, "headroom_collector_success", collector=collector)
    return v


def wait_for(pred, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout * SLOW
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_whitespace_argv0_does_not_fail_procfs(tree: KubeTree, procs: Procs,
                                                  tmp_path: Path) -> None:
    """``exec -a ' ' sleep`` raised IndexError in process_name and failed the procfs
    collector for the whole node, on every scrape (docs/threats.md: blank-argv0)."""
    pod_uid, pod = tree.pod()
    cid, bad = tree.container(pod)
    _, good = tree.container(pod)
    for argv0 in (" ", "\t", " \n "):
        procs.spawn(tree, bad, [argv0, "600"], executable="/bin/sleep")
    procs.spawn(tree, good, ["healthy-worker", "600"], executable="/bin/sleep")
    with serve(real_args(tree), tmp_path) as s:
        _, values = scrape(s.url)
        assert success(values, "procfs") == 1
        assert series(values, "headroom_processes", pod=pod_uid, process="healthy-worker")
        # The whitespace-named processes are counted under their executable's name.
        assert series(values, "headroom_processes", pod=pod_uid, container=cid[:12],
                      process="sleep") == [3.0]


def test_huge_process_names_are_bounded(tree: KubeTree, procs: Procs,
                                           tmp_path: Path) -> None:
    """15 processes with 131,000-byte names made /metrics 17.7 MB a scrape and took the
    exporter from 46 to 373 MB RSS (the chart's limit is 160 MiB; docs/threats.md:
    huge-process-names)."""
    pod_uid, pod = tree.pod()
    _, hostile = tree.container(pod)
    _, good = tree.container(pod)
    for i in range(15):
        name = f"{i:02d}" + "x" * 130_998
        procs.spawn(tree, hostile, [name, "600"], executable="/bin/sleep")
    procs.spawn(tree, good, ["healthy-worker", "600"], executable="/bin/sleep")
    with serve(real_args(tree, "--flight-recorder.window=1m"), tmp_path) as s:
        sizes = []
        for _ in range(5):
            text, values = scrape(s.url)
            sizes.append(len(text))
            time.sleep(0.3)
        labels = re.findall(r'process="((?:[^"\\]|\\.)*)"', text)
        assert labels and max(len(v) for v in labels) <= LABEL_MAX
        assert any(v.endswith("...") for v in labels), "truncation is marked"
        assert series(values, "headroom_processes", pod=pod_uid, process="healthy-worker")
        assert max(sizes) < 200_000, sizes
        assert rss_kib(s.proc.pid) < 100 * 1024, f"RSS {rss_kib(s.proc.pid)} KiB"


def test_zombie_leader_does_not_fail_tmpfs(tree: KubeTree, procs: Procs,
                                             tmp_path: Path) -> None:
    """The mountinfo of a zombie leader (a container whose main thread exited while its
    other threads run) fails with EINVAL, and the tmpfs collector failed node-wide
    (docs/threats.md: zombie-leader)."""
    zombie_uid, zombie_pod = tree.pod()
    _, zc = tree.container(zombie_pod)
    good_uid, good_pod = tree.pod()
    _, gc = tree.container(good_pod)
    leader = procs.spawn(tree, zc, [sys.executable, "-c", ZOMBIE_LEADER])
    procs.spawn(tree, gc, ["healthy-worker", "600"], executable="/bin/sleep")
    wait_for(lambda: Path(f"/proc/{leader.pid}/stat").read_text().split()[2] == "Z")
    with serve(real_args(tree), tmp_path) as s:
        _, values = scrape(s.url)
        assert success(values, "tmpfs") == 1
        assert success(values, "procfs") == 1
        assert series(values, "headroom_tmpfs_size_bytes", pod=good_uid, mount="/dev/shm")
        # The zombie leader's process is still measured, through a live thread.
        assert series(values, "headroom_processes", pod=zombie_uid, process="python3")
        assert series(values, "headroom_tmpfs_size_bytes", pod=zombie_uid, mount="/dev/shm")


def test_non_utf8_cgroup_name_does_not_fail_discovery(tree: KubeTree, procs: Procs,
                                                          tmp_path: Path) -> None:
    """A cgroup whose name is not UTF-8 failed discovery on every host scan
    (/proc/PID/cgroup decoded strictly), so nothing at all was collected (docs/threats.md:
    non-utf8-cgroup)."""
    pod_uid, pod = tree.pod()
    _, good = tree.container(pod)
    procs.spawn(tree, good, ["healthy-worker", "600"], executable="/bin/sleep")
    odd = os.fsencode(str(tree.hierarchy.dir(tree.base))) + b"/odd-\xff\xfe"
    os.mkdir(odd)
    tree.made.append(Path(os.fsdecode(odd)))
    procs_file = odd + b"/cgroup.procs"

    def enter() -> None:
        with open(procs_file, "w") as f:
            f.write(str(os.getpid()))

    # A vLLM-looking process in it: the host scan reads its /proc/PID/cgroup.
    p = subprocess.Popen(["VLLM::EngineCore", "600"], executable="/bin/sleep",
                         preexec_fn=enter)
    procs.procs.append(p)
    with serve(real_args(tree, host_scan=True), tmp_path) as s:
        _, values = scrape(s.url)
        assert success(values, "discovery") == 1
        assert success(values, "procfs") == 1
        assert series(values, "headroom_processes", pod=pod_uid, process="healthy-worker")


def test_own_cgroup_namespace_is_resolved_not_silently_empty(
        tree: KubeTree, procs: Procs, tmp_path: Path) -> None:
    """In its own cgroup namespace (``unshare -C``; containers on cgroup v2 by default)
    /proc/PID/cgroup paths are relative to the namespace root: a vLLM outside Kubernetes
    was tracked under a wrong path and silently not monitored (docs/threats.md:
    own-cgroup-namespace)."""
    if subprocess.run(["unshare", "--help"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare (util-linux)")
    _, pod = tree.pod()
    _, good = tree.container(pod)
    procs.spawn(tree, good, ["healthy-worker", "600"], executable="/bin/sleep")
    outside = f"{tree.base}/vllm-host"
    tree.mkdir(outside)
    procs.spawn(tree, outside, ["VLLM::EngineCore", "600"], executable="/bin/sleep")
    with serve(real_args(tree, host_scan=True), tmp_path, prefix=["unshare", "--cgroup"]) as s:
        _text, values = scrape(s.url)
        assert success(values, "discovery") == 1
        assert series(values, "headroom_memory_usage_bytes", pod="/" + outside), \
            "the vLLM outside Kubernetes is not monitored"
        assert series(values, "headroom_processes", pod="/" + outside,
                      process="EngineCore")
    if "/" in tree.base.strip("/"):
        assert "its own cgroup namespace" in s.log_text()
    else:  # run from the root cgroup (the v2 guest): the namespace root is the real root
        assert "its own cgroup namespace" not in s.log_text()


# 1,100 processes under the v2 guest's emulation take minutes to start, and the fd budget
# does not depend on the cgroup version: this one runs on the host only.
@pytest.mark.host_only
def test_more_processes_than_the_fd_limit(tree: KubeTree, procs: Procs,
                                             tmp_path: Path) -> None:
    """1,100 processes in tracked cgroups at an open-file limit of 1,024: the exporter
    kept every /proc/PID/status open, sat at 1,024 fds, stopped answering /healthz and
    logged 3.9 MB/s. Now kept-open files stay under a budget (half the limit) and the rest
    are read open-read-close (docs/threats.md: fd-exhaustion)."""
    if subprocess.run(["prlimit", "--version"], capture_output=True).returncode != 0:
        pytest.skip("needs prlimit (util-linux)")
    pod_uid, pod = tree.pod()
    _, many = tree.container(pod)
    procs.spawn(tree, many, ["bash", "-c", "for i in $(seq 1100); do sleep 600 & done; wait"])

    def all_exec_ed() -> bool:  # forked children are "bash" until they exec sleep
        pids = (tree.hierarchy.dir(many) / "cgroup.procs").read_text().split()
        comms = []
        for pid in pids:
            with contextlib.suppress(OSError):
                comms.append(Path(f"/proc/{pid}/comm").read_text().strip())
        return comms.count("sleep") == 1100

    wait_for(all_exec_ed, timeout=90)
    with serve(real_args(tree), tmp_path, prefix=["prlimit", "--nofile=1024:1024"]) as s:
        for _ in range(3):
            _, values = scrape(s.url)
            assert success(values, "procfs") == 1 and success(values, "cgroup") == 1
            assert series(values, "headroom_processes", pod=pod_uid, process="sleep") == [
                1100.0]
            assert http_get(s.url + "/healthz", timeout=5)[0] == 200
            open_fds = len(os.listdir(f"/proc/{s.proc.pid}/fd"))
            assert open_fds < 1024 * 3 // 4, open_fds
        assert len(s.log_text()) < 5000
