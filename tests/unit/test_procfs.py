"""Tier 1: process naming, /proc/PID/status and smaps_rollup parsing, grouping and the cap,
and the collector's caches against a fixture tree."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from exporter.collectors.procfacts import (
    parse_cgroup_procs,
    parse_smaps_rollup,
    parse_status,
    split_cmdline,
)
from exporter.collectors.procfs import (
    ProcfsCollector,
    ProcfsSettings,
    group_processes,
    process_name,
)
from exporter.collectors.vllm.identity import is_vllm_cmdline
from exporter.host.paths import HostPaths
from exporter.model import CgroupRef, ProcessPss, ProcessStatus
from tests.conftest import HOSTS

NAMES = [
    # retitled vLLM processes: cmdline is the title padded with NULs (seen on this machine)
    (b"VLLM::EngineCore\0\0\0\0\0\0\0\0", "VLLM::EngineCor", "EngineCore"),
    (b"VLLM::EngineCore_DP1\0\0\0", "VLLM::EngineCor", "EngineCore_DP1"),
    (b"VLLM::Worker_TP0\0", "VLLM::Worker_TP", "Worker_TP0"),
    (b"VLLM::APIServer_1\0", "VLLM::APIServe", "APIServer_1"),
    (b"VLLM::DPCoordinator\0", "VLLM::DPCoordin", "DPCoordinator"),
    # setproctitle without NUL padding keeps spaces in one argument
    (b"VLLM::Worker_TP3                \0", "VLLM::Worker_TP", "Worker_TP3"),
    # the un-retitled API server
    (b"/usr/bin/python3\0/usr/local/bin/vllm\0serve\0/models/x\0--port\0008000\0", "vllm",
     "APIServer"),
    (b"/usr/local/bin/vllm\0serve\0meta-llama/Llama-3-8B\0", "vllm", "APIServer"),
    (b"python3\0-m\0vllm.entrypoints.openai.api_server\0--model\0/m\0", "python3",
     "APIServer"),
    # everything else: the executable's name
    (b"/usr/bin/python3\0-c\0from multiprocessing.resource_tracker import main\0",
     "python3", "python3"),
    (b"/usr/local/bin/envoy\0-c\0/etc/envoy.yaml\0", "envoy", "envoy"),
    (b"/usr/local/bin/vllm\0bench\0", "vllm", "vllm"),
    (b"", "kworker/0:1", "kworker/0:1"),  # kernel thread / zombie: comm
]


@pytest.mark.parametrize(("cmdline", "comm", "expected"), NAMES)
def test_process_name(cmdline: bytes, comm: str, expected: str) -> None:
    assert process_name(split_cmdline(cmdline), comm) == expected


def test_is_vllm_cmdline() -> None:
    assert is_vllm_cmdline(split_cmdline(b"VLLM::EngineCore\0"))
    assert is_vllm_cmdline(["/usr/local/bin/vllm", "serve", "m"])
    assert not is_vllm_cmdline(["/usr/local/bin/vllm", "bench", "serve"])
    assert not is_vllm_cmdline(["python3", "-m", "vllm.entrypoints.cli.main", "bench"])
    assert not is_vllm_cmdline([])


def test_parse_status_reads_kb_as_bytes() -> None:
    text = (HOSTS / "v1-cgroupfs-containerd/proc/4102/status").read_text()
    assert parse_status(text) == ("VLLM::Worker_T", 5_100_000 * 1024, 380_000 * 1024,
                                  1_048_576 * 1024, 0)
    # A zombie has no memory lines at all.
    assert parse_status("Name:\tdefunct\nState:\tZ (zombie)\nTgid:\t7\n") is None


def test_parse_smaps_rollup() -> None:
    text = (HOSTS / "v1-cgroupfs-containerd/proc/4100/smaps_rollup").read_text()
    assert parse_smaps_rollup(text) == ProcessPss(1_640_000 * 1024, 120_000 * 1024, 1024 * 1024)
    with pytest.raises(ValueError, match=r"kernel < 5\.7"):
        parse_smaps_rollup("Rss: 10 kB\nPss: 5 kB\n")


def test_parse_cgroup_procs_drops_zero_pids_of_other_namespaces() -> None:
    assert parse_cgroup_procs("12\n0\n13\n") == [12, 13]


def _p(pid: int, name: str, anon: int) -> ProcessStatus:
    return ProcessStatus(pid, name, anon, 1, 0, 0)


def test_group_sums_by_name_and_folds_the_tail_into_other() -> None:
    procs = [_p(1, "APIServer", 100), _p(2, "Worker_TP0", 500), _p(3, "Worker_TP1", 400),
             _p(4, "python3", 5), _p(5, "python3", 6), _p(6, "sh", 1)]
    groups = group_processes(procs, {1: ProcessPss(90, 1, 0)}, cap=3)
    by = {g.name: g for g in groups}
    assert set(by) == {"Worker_TP0", "Worker_TP1", "other"}
    assert by["other"].count == 4 and by["other"].rss_anon == 112
    assert by["other"].pss == ProcessPss(90, 1, 0)
    assert by["Worker_TP0"].pss is None
    uncapped = {g.name: g for g in group_processes(procs, {}, cap=10)}
    assert uncapped["python3"].count == 2 and uncapped["python3"].rss_anon == 11


def test_pss_gate_interval_and_vanished_pid(tmp_path: Path) -> None:
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "v1-cgroupfs-containerd", root, symlinks=True)
    paths = HostPaths(procfs=root / "proc", cgroupfs=root / "sys/fs/cgroup")
    h = paths.detect_memory_hierarchy()
    now = [1000.0]
    c = ProcfsCollector(paths, ProcfsSettings(pss_interval=60, pss_max_rss=2 << 30),
                        clock=lambda: now[0])
    ref = next(r for r in _refs(h) if r.container_id and r.container_id.startswith("01"))
    result = c.collect(h, [ref])
    groups = {g.name: g for g in result.groups[ref.path]}
    # pid 4999 is listed in cgroup.procs but gone from /proc: skipped silently
    assert sorted(p.pid for p in result.processes[ref.path]) == [4100, 4101, 4102, 4103, 4104]
    assert groups["APIServer"].pss is not None  # 1.9 GiB RSS: under the 2 GiB gate
    assert groups["Worker_TP0"].pss is None  # 6.3 GiB RSS: never read
    # The smaps_rollup file changes, but the next read is not due for 60 s.
    smaps = root / "proc/4100/smaps_rollup"
    smaps.write_text(smaps.read_text().replace("Pss_Anon:       1640000", "Pss_Anon:       1"))
    now[0] += 30
    assert {g.name: g for g in c.collect(h, [ref]).groups[ref.path]}["APIServer"].pss == \
        groups["APIServer"].pss
    now[0] += 31
    refreshed = {g.name: g for g in c.collect(h, [ref]).groups[ref.path]}["APIServer"].pss
    assert refreshed is not None and refreshed.anon == 1024
    # A process that exits between the pid list and its status read is skipped (a fresh
    # collector: on a real /proc a kept-open status file fails with ESRCH instead).
    shutil.rmtree(root / "proc/4102")
    fresh = ProcfsCollector(paths, ProcfsSettings())
    names = {g.name for g in fresh.collect(h, [ref]).groups[ref.path]}
    assert "Worker_TP0" not in names and "Worker_TP1" in names


def _refs(h: object) -> list[CgroupRef]:
    from exporter.host.workloads import walk_kubepods

    return walk_kubepods(h, "kubepods")  # type: ignore[arg-type]


def test_a_name_read_before_exec_is_read_again_at_the_second_look(tmp_path: Path) -> None:
    """A process read between fork and exec (placed in its cgroup first, as runtimes do)
    shows its parent's command line; an exec that keeps comm (python3 -> python3) changes
    no other field read: its name is read once more at the second look, then cached."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "v1-cgroupfs-containerd", root, symlinks=True)
    paths = HostPaths(procfs=root / "proc", cgroupfs=root / "sys/fs/cgroup")
    h = paths.detect_memory_hierarchy()
    ref = next(r for r in _refs(h) if r.container_id and r.container_id.startswith("01"))
    cmdline = root / "proc/4104/cmdline"  # comm python3, before and after
    cmdline.write_bytes(b"python3\0-m\0pytest\0")  # the parent's, before exec
    c = ProcfsCollector(paths, ProcfsSettings())

    def names() -> set[str]:
        return {g.name for g in c.collect(h, [ref]).groups[ref.path]}

    before = names()
    cmdline.write_bytes(b"VLLM::Tokenizer_X\0")  # exec'd: python3 with a title argv[0]
    after = names()
    cmdline.write_bytes(b"python3\0-m\0pytest\0")  # no further reads: cached
    assert "python3" in before and "Tokenizer_X" not in before
    assert "Tokenizer_X" in after and "python3" not in after and names() == after
