"""The fuzz tier: every parser that reads bytes a pod controls, under hypothesis.

Properties: only the parser's documented error escapes (ValueError and its subclasses,
which the collectors turn into a failed source), never IndexError, KeyError, TypeError or
UnicodeError; outputs stay bounded (label values, entries, memory). Collector-level cases
write a fuzzed /proc entry and run the real collector over it: nothing escapes at all.

Deterministic by default (``derandomize``): CI runs the same cases every time. Scale with
``HEADROOM_FUZZ_EXAMPLES`` (cases per property, default 200); ``HEADROOM_FUZZ_RANDOM=1``
explores new cases. Marker ``fuzz``: ``pytest -m fuzz``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.collectors.cgroup_parse import (
    RawCgroup,
    parse_cgroup,
    parse_events,
    parse_flat_keyed,
    parse_limit,
    parse_pressure,
    parse_stat,
)
from exporter.collectors.kmsg import parse_kmsg_record
from exporter.collectors.kube.parse import LineSplitter, decode_watch_event, parse_pod
from exporter.collectors.procfacts import (
    parse_cgroup_procs,
    parse_smaps_rollup,
    parse_status,
    split_cmdline,
)
from exporter.collectors.procfs import ProcfsCollector, ProcfsSettings, process_name
from exporter.collectors.tmpfs import TmpfsSource, parse_mountinfo, pod_tmpfs_mounts
from exporter.collectors.vllm.kv_events import (
    KvBlockTracker,
    KvEventDecodeError,
    decode_batch,
)
from exporter.collectors.vllm.metrics import VllmParseError, parse_vllm_metrics
from exporter.host.paths import HostPaths, MemoryHierarchy
from exporter.host.workloads import classify
from exporter.model import CgroupRef

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("HEADROOM_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                derandomize=os.environ.get("HEADROOM_FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
LABEL_MAX = 128 + len("...")  # the label-value bound, marker included

# Text that looks like the real files often enough to reach deep branches.
KERNELISH = st.text(alphabet=st.sampled_from(
    list("0123456789 \t\n:=-_./kBabcdefghijklmnopqrstuvwxyzAN\\\x00\x1b\u202e\udcff")),
    max_size=400)
ANY_TEXT = st.one_of(st.text(max_size=300), KERNELISH)
ANY_BYTES = st.one_of(st.binary(max_size=600), KERNELISH.map(
    lambda s: s.encode("utf-8", "surrogateescape")))


def _status(name: str, rss: list[int]) -> str:
    return (f"Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t7\n"
            f"VmRSS:\t{sum(rss)} kB\nRssAnon:\t{rss[0]} kB\nRssFile:\t{rss[1]} kB\n"
            f"RssShmem:\t{rss[2]} kB\nVmSwap:\t0 kB\n")


# --- /proc ------------------------------------------------------------------------------


@FUZZ
@given(raw=ANY_BYTES, comm=st.text(max_size=20))
def test_cmdline_gives_a_bounded_name(raw: bytes, comm: str) -> None:
    name = process_name(split_cmdline(raw), comm)
    assert isinstance(name, str) and name
    assert len(name) <= LABEL_MAX


@FUZZ
@given(argv=st.lists(st.text(max_size=50), max_size=6), comm=st.text(max_size=20))
def test_argv_shapes_give_a_bounded_name(argv: list[str], comm: str) -> None:
    name = process_name(argv, comm)
    assert isinstance(name, str) and name and len(name) <= LABEL_MAX


@FUZZ
@given(text=ANY_TEXT)
def test_status_only_value_errors(text: str) -> None:
    try:
        out = parse_status(text)
    except ValueError:
        return
    assert out is None or len(out) == 5


@FUZZ
@given(name=st.text(max_size=64), rss=st.lists(st.integers(0, 1 << 40), min_size=3,
                                                max_size=3))
def test_status_with_any_name_parses(name: str, rss: list[int]) -> None:
    # The kernel escapes newline and backslash in Name (proc_task_name): the rest is the
    # process's choice.
    safe = name.replace("\\", "\\\\").replace("\n", "\\n")
    out = parse_status(_status(safe, rss))
    assert out is not None and out[1:4] == tuple(r * 1024 for r in rss)


@FUZZ
@given(text=ANY_TEXT)
def test_smaps_rollup_and_cgroup_procs(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_smaps_rollup(text)
    pids = parse_cgroup_procs(text)
    assert all(isinstance(p, int) and p > 0 for p in pids)


@FUZZ
@given(text=ANY_TEXT)
def test_mountinfo_never_raises(text: str) -> None:
    mounts = parse_mountinfo(text)
    assert len(mounts) <= text.count("\n") + 1
    pod_tmpfs_mounts(mounts, {m.dev for m in mounts})


@FUZZ
@given(point=st.text(min_size=1, max_size=80))
def test_mountinfo_escaped_mount_points_round_trip(point: str) -> None:
    escaped = (point.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011")
               .replace("\n", "\\012"))
    line = f"100 90 0:55 / /{escaped} rw,nosuid - tmpfs shm rw,size=65536k\n"
    (m,) = parse_mountinfo(line)
    assert m.mount_point == "/" + point and m.fstype == "tmpfs"


# --- cgroup files -----------------------------------------------------------------------


@FUZZ
@given(text=ANY_TEXT, version=st.sampled_from([1, 2]))
def test_cgroup_files_only_value_errors(text: str, version: int) -> None:
    parse_flat_keyed(text)
    parse_stat(text, version)  # type: ignore[arg-type]
    for fn in (parse_pressure, parse_limit):
        with contextlib.suppress(ValueError):
            fn(text)
    raw = RawCgroup(version=version, usage=text, stat=text, limits=(text,),  # type: ignore[arg-type]
                    events=text, pressure=text, failcnt=text, oom_control=text)
    for fn2 in (lambda: parse_events(raw), lambda: parse_cgroup(raw, 1 << 30)):
        with contextlib.suppress(ValueError):
            fn2()


@FUZZ
@given(parts=st.lists(st.one_of(
    st.text(max_size=40),
    st.sampled_from(["kubepods", "kubepods.slice", "burstable", "besteffort",
                     "kubepods-burstable.slice", "pod1234-5678", "cri-containerd-abc.scope",
                     "crio-0123456789abcdef.scope", "docker-ff.scope", "\udcff\udcfe"]),
    st.uuids().map(lambda u: f"pod{u}"),
    st.uuids().map(lambda u: f"kubepods-burstable-pod{str(u).replace('-', '_')}.slice"),
), max_size=6))
def test_cgroup_path_shapes_never_raise(parts: list[str]) -> None:
    ref = classify("/".join(parts))
    if ref is not None:
        assert not ref.path.startswith("/") and ref.pod_uid is not None


# --- the kernel log ---------------------------------------------------------------------


@FUZZ
@given(message=ANY_TEXT, comm=st.text(max_size=30), memcg=st.text(max_size=60),
       pid=st.integers(0, 1 << 31))
def test_kmsg_records(message: str, comm: str, memcg: str, pid: int) -> None:
    parse_kmsg_record(message)
    line = (f"3,1234,5678,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),"
            f"oom_memcg=/x,task_memcg={memcg},task={comm},pid={pid},uid=0\n SUBSYSTEM=memory")
    v = parse_kmsg_record(line)
    if v is not None:
        assert v.pid >= 0 and "\n" not in v.comm + v.memcg


# --- vLLM -------------------------------------------------------------------------------


METRIC_LINE = st.builds(
    lambda name, labels, value: f"{name}{{{labels}}} {value}",
    st.sampled_from(["vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                     "vllm:cache_config_info", "vllm:num_preemptions_total",
                     "vllm:gpu_cache_usage_perc", "vllm:kv_offload_config_info", "x"]),
    st.lists(st.builds(lambda k, v: f'{k}="{v}"',
                       st.sampled_from(["model_name", "engine", "num_gpu_blocks",
                                        "block_size", "kv_cache_memory_bytes", "medium"]),
                       st.text(alphabet=st.characters(blacklist_characters='"\\\n'),
                               max_size=20)),
             max_size=4).map(",".join),
    st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=5)),
)


@FUZZ
@given(body=st.one_of(ANY_TEXT, st.lists(st.one_of(METRIC_LINE, ANY_TEXT),
                                         max_size=30).map("\n".join)))
def test_vllm_metrics_bodies_only_parse_errors(body: str) -> None:
    try:
        stats = parse_vllm_metrics(body)
    except VllmParseError:
        return
    assert len(stats.engines) <= body.count("\n") + 1


# --- KV-event frames (msgpack) ----------------------------------------------------------

MSGPACK_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(1 << 63), (1 << 64) - 1), st.floats(),
              st.text(max_size=20), st.binary(max_size=20)),
    lambda children: st.one_of(st.lists(children, max_size=5),
                               st.dictionaries(st.text(max_size=10), children, max_size=5)),
    max_leaves=30,
)
EVENT = st.one_of(
    MSGPACK_VALUES,
    st.builds(lambda tag, hashes, medium: [tag, hashes, None, [], 16, None, medium],
              st.sampled_from(["BlockStored", "BlockRemoved", "AllBlocksCleared", "Other"]),
              st.lists(st.one_of(st.integers(-(1 << 63), (1 << 64) - 1), st.binary(max_size=40),
                                 st.text(max_size=5)), max_size=10),
              st.one_of(st.none(), st.text(max_size=10), st.integers())),
)


def _pack(value: object) -> bytes:
    try:
        return bytes(msgpack.packb(value))
    except (OverflowError, ValueError, TypeError):
        return b"\xc1"  # msgpack's never-used byte: garbage, as a hostile peer might send


@FUZZ
@given(payload=st.one_of(
    st.binary(max_size=300),
    st.builds(lambda ts, events, rank: _pack([ts, events, rank]),
              st.one_of(st.floats(), st.integers(-10, 1 << 40), st.text(max_size=3)),
              st.lists(EVENT, max_size=8), st.one_of(st.none(), st.integers(-5, 5))),
), seq=st.integers(-(1 << 63), (1 << 63) - 1))
def test_kv_event_frames(payload: bytes, seq: int) -> None:
    with contextlib.suppress(KvEventDecodeError):
        decode_batch(payload)
    tracker = KvBlockTracker(max_blocks=64)
    for i in range(2):
        tracker.apply(seq + i if seq < (1 << 63) - 2 else seq, payload)
    assert sum(tracker.prefix_cache_blocks().values()) <= 64


# --- Kubernetes API lines ---------------------------------------------------------------


@FUZZ
@given(chunks=st.lists(ANY_BYTES, max_size=8))
def test_kubernetes_watch_lines(chunks: list[bytes]) -> None:
    splitter = LineSplitter(max_bytes=256)
    for chunk in chunks:
        for line in splitter.feed(chunk):
            assert len(line) <= 256
            try:
                event = decode_watch_event(line)
            except ValueError:
                continue
            parse_pod(event.object)
    assert len(splitter._buf) <= 256


@FUZZ
@given(obj=st.dictionaries(st.sampled_from(["metadata", "spec", "status", "kind"]),
                           MSGPACK_VALUES, max_size=4))
def test_kubernetes_pod_objects(obj: dict[str, object]) -> None:
    parse_pod(obj)


# --- whole collectors over fuzzed /proc entries -----------------------------------------


def _host(tmp: Path) -> tuple[HostPaths, MemoryHierarchy, CgroupRef]:
    mem = tmp / "sys/fs/cgroup/memory"
    (mem / "pod").mkdir(parents=True, exist_ok=True)
    (mem / "memory.usage_in_bytes").write_text("0\n")
    (tmp / "proc").mkdir(exist_ok=True)
    (tmp / "proc/meminfo").write_text("MemTotal: 1024 kB\n")
    (mem / "pod/cgroup.procs").write_text("7\n8\n")
    for pid in (7, 8):
        (tmp / f"proc/{pid}").mkdir(parents=True, exist_ok=True)
    paths = HostPaths(procfs=tmp / "proc", cgroupfs=tmp / "sys/fs/cgroup")
    return paths, MemoryHierarchy(mem, 1), CgroupRef("pod")


@FUZZ
@given(cmdline=ANY_BYTES, name=st.text(max_size=40),
       status=st.one_of(st.none(), ANY_TEXT))
def test_procfs_collector_survives_any_process(tmp_path: Path, cmdline: bytes, name: str,
                                               status: str | None) -> None:
    paths, h, ref = _host(tmp_path)
    (tmp_path / "proc/7/cmdline").write_bytes(cmdline)
    safe = name.replace("\\", "\\\\").replace("\n", "\\n")
    (tmp_path / "proc/7/status").write_text(
        status if status is not None else _status(safe, [1, 2, 3]),
        encoding="utf-8", errors="surrogateescape")
    # A healthy neighbour in the same cgroup keeps its series whatever pid 7 is.
    (tmp_path / "proc/8/cmdline").write_bytes(b"python3\0serve.py\0")
    (tmp_path / "proc/8/status").write_text(_status("python3", [10, 20, 30]))
    result = ProcfsCollector(paths, ProcfsSettings()).collect(h, [ref])
    names = {g.name for g in result.groups["pod"]}
    assert "python3" in names
    assert all(len(n) <= LABEL_MAX for n in names)


@FUZZ
@given(mountinfo=ANY_TEXT)
def test_tmpfs_collector_survives_any_mount_table(tmp_path: Path, mountinfo: str) -> None:
    paths, h, ref = _host(tmp_path)
    (tmp_path / "proc/7/mountinfo").write_text(mountinfo, encoding="utf-8",
                                               errors="surrogateescape")
    (tmp_path / "proc/8/mountinfo").write_text(mountinfo, encoding="utf-8",
                                               errors="surrogateescape")
    source = TmpfsSource(paths, statvfs=lambda p: (0, 0))
    result = source.read(h, {"pod": [ref]}, {"pod": [7, 8]})
    assert result.data is not None
    assert len(result.data.mounts.get("pod", ())) <= mountinfo.count("\n") + 1
