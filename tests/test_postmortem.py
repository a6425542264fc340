"""The post-mortem's pure parts: kernel-log records (as this machine's kernel wrote them),
the flight recorder's bounds and the OOM watcher's decisions (table-driven, with a fake
clock and liveness). The kills themselves are in tests/test_kernel.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from exporter.collectors.kmsg import KernelVictim, parse_kmsg_record
from exporter.model import Workload
from exporter.oom.recorder import FlightRecorder
from exporter.oom.watcher import CgroupLabels, OomWatcher, ProcessEntry, kill_domains

# /dev/kmsg records written by this machine's kernel (6.18) for a real memcg OOM kill.
OOM_KILL = (
    "6,416,1416981076,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
    "mems_allowed=0,oom_memcg=/process_api/74a5/headroom-test-0e76a783/kubepods/burstable/"
    "pod162b8089-8fe2-4468-939a-eccc9bd5ed36/a67ad2df,task_memcg=/process_api/74a5/"
    "headroom-test-0e76a783/kubepods/burstable/pod162b8089-8fe2-4468-939a-eccc9bd5ed36/"
    "a67ad2df,task=python,pid=26603,uid=0\n"
)
KILLED = (
    "3,417,1416981140,-;Memory cgroup out of memory: Killed process 26603 (python) "
    "total-vm:82292kB, anon-rss:65152kB, file-rss:6712kB, shmem-rss:0kB, UID:0 "
    "pgtables:192kB oom_score_adj:0\n"
)


def test_kmsg_records() -> None:
    v = parse_kmsg_record(OOM_KILL)
    assert v is not None and (v.pid, v.comm) == (26603, "python")
    assert v.memcg == ("process_api/74a5/headroom-test-0e76a783/kubepods/burstable/"
                       "pod162b8089-8fe2-4468-939a-eccc9bd5ed36/a67ad2df")
    k = parse_kmsg_record(KILLED)
    assert k is not None and (k.pid, k.comm, k.memcg) == (26603, "python", "")
    assert parse_kmsg_record("4,339,1416980502,-;python invoked oom-killer: gfp_mask=0xcc0") \
        is None
    # VLLM titles are cut at 15 characters in comm: the process table names it fully.
    cut = OOM_KILL.replace("task=python", "task=VLLM::EngineCor")
    assert parse_kmsg_record(cut).comm == "VLLM::EngineCor"  # type: ignore[union-attr]


def test_flight_recorder_is_bounded_by_time_and_slots() -> None:
    now = [1000.0]
    r = FlightRecorder(window=60, scrape_slots=10, clock=lambda: now[0])
    for i in range(300):
        now[0] += 0.5
        r.record_usage({"a": i})
    h = r.history("a")
    assert len(h["usage"]) == 61  # one per second over the window
    assert h["usage"][-1] == [now[0] // 1, 299]  # the second's maximum
    assert h["usage"][0][0] >= now[0] - 60
    assert json.dumps(h)  # what the OOM document embeds is JSON as it is


# --- the OOM watcher, table-driven ---------------------------------------------------------
# Each case: the cgroups' labels and process tables one scrape saw, which pids are still
# alive, whether the kernel log is readable, and then steps of (seconds later, kill
# counters read, kernel-log records read) with the kills expected after each step.

POD = "kubepods/burstable/pod1"
CTR = POD + "/abc"
POD_W = Workload("llm", "vllm-0", "")
CTR_W = Workload("llm", "vllm-0", "vllm")
LABELS = {POD: CgroupLabels(POD_W, POD_W), CTR: CgroupLabels(CTR_W, POD_W)}
PROCS = {CTR: [ProcessEntry(101, "APIServer", 700 << 20),
               ProcessEntry(102, "EngineCore", 3 << 30)]}


def victim(pid: int, comm: str, memcg: str = CTR) -> KernelVictim:
    return KernelVictim(pid, comm, memcg, f"oom-kill:...task={comm},pid={pid}")


@dataclass
class Step:
    after: float  # seconds since the previous step
    counters: dict[str, int]
    victims: list[KernelVictim] = field(default_factory=list)
    kills: list[tuple[str, str, str]] = field(default_factory=list)  # (cgroup, process, src)


CASES = {
    "kernel log names the victim, process table its full name": (True, {101}, [
        Step(0, {CTR: 0}),
        Step(1, {CTR: 1}, [victim(102, "VLLM::EngineCor")], [(CTR, "EngineCore", "kmsg")]),
    ]),
    "kills before the exporter started are history": (False, {101, 102}, [
        Step(0, {CTR: 3}),
        Step(1, {CTR: 3}),
    ]),
    "no kernel log: the largest process that is gone, as a guess": (False, {101}, [
        Step(0, {CTR: 0}),
        Step(1, {CTR: 1}, kills=[(CTR, "EngineCore", "guess")]),
    ]),
    "no kernel log and nothing gone yet: wait, then name nobody": (False, {101, 102}, [
        Step(0, {CTR: 0}),
        Step(1, {CTR: 1}),
        Step(0.5, {CTR: 1}),
        Step(1.5, {CTR: 1}, kills=[(CTR, "unknown", "unknown")]),
    ]),
    "kernel log readable: the counter waits for the log line": (True, {101}, [
        Step(0, {CTR: 0}),
        Step(1, {CTR: 1}),
        Step(0.5, {CTR: 1}, [victim(102, "VLLM::EngineCor")], [(CTR, "EngineCore", "kmsg")]),
    ]),
    "one kill logged on two lines counts once": (True, {101}, [
        Step(0, {CTR: 0}),
        Step(1, {CTR: 1}, [victim(102, "VLLM::EngineCor"), victim(102, "VLLM::EngineCor", "")],
             [(CTR, "EngineCore", "kmsg")]),
        Step(5, {CTR: 1}),
    ]),
    "a cgroup gone before its counter was read is counted from the log": (True, {101}, [
        Step(0, {}),
        Step(1, {}, [victim(102, "VLLM::EngineCor")]),
        Step(3, {}, kills=[(CTR, "EngineCore", "kmsg")]),
    ]),
    "a guess and the late log line of the same kill count once": (False, {101}, [
        Step(0, {CTR: 0}),
        Step(1, {CTR: 1}, kills=[(CTR, "EngineCore", "guess")]),
        Step(1, {CTR: 1}, [victim(102, "VLLM::EngineCor")]),
        Step(3, {CTR: 1}),
    ]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_oom_watcher(case: str) -> None:
    kmsg, alive, steps = CASES[case]
    now = [1000.0]
    w = OomWatcher(is_alive=lambda pid: pid in alive, kmsg_available=kmsg,
                   clock=lambda: now[0])
    w.observe(LABELS, PROCS)
    total = 0
    for i, step in enumerate(steps):
        now[0] += step.after
        got = [(k.cgroup, k.process, k.victim_source) for k in w.check(step.counters,
                                                                       step.victims)]
        assert got == step.kills, f"step {i}"
        total += len(got)
    assert sum(w.counts.values()) == total
    assert all(key[0] == POD_W for key in w.counts)  # counted on the pod's labels


def test_kill_domains_count_each_kill_once() -> None:
    refs = [(POD, "1", True), (CTR, "1", False), ("system.slice/x", None, False)]
    assert kill_domains(refs, 2) == [POD, "system.slice/x"]  # v2: hierarchical events
    assert kill_domains(refs, 1) == [CTR, "system.slice/x"]  # v1: the victim's own cgroup
