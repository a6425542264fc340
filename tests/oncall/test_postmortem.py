"""The post-mortem's pure parts: kernel-log records (as this machine's kernel wrote them)
and the flight recorder's bounds, and the OOM watcher table-driven. The kills on a real
kernel are in tests/kernel/test_kernel.py and tests/kernel/test_kernel_kills.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from exporter.collectors.kill_counters import KillCounters
from exporter.collectors.kmsg import KernelVictim, pair_victims, parse_kmsg_record
from exporter.host.paths import HostPaths, MemoryHierarchy
from exporter.model import Workload
from exporter.oom.members import NEW_PER_PASS, MemberTable
from exporter.oom.watcher import RECENT, CgroupLabels, OomKill, OomWatcher, ProcessEntry
from exporter.postmortem.recorder import FlightRecorder
from tests.conftest import HOSTS

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


# --- the OOM watcher: every path without a kernel (time and liveness injected) ----------

POD = "kubepods/burstable/pod162b8089-8fe2-4468-939a-eccc9bd5ed36"
C1, C2 = f"{POD}/{'a1' * 32}", f"{POD}/{'c2' * 32}"
POD_W = Workload("ns", "vllm-0", "")
C1_W = Workload("ns", "vllm-0", "engine")


def victim(memcg: str, pid: int, comm: str = "python") -> KernelVictim:
    return KernelVictim(pid, comm, memcg, f"oom-kill:...task={comm},pid={pid},uid=0")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watcher(kmsg: bool = True, alive: frozenset[int] = frozenset()) -> tuple[OomWatcher, Clock]:
    clock = Clock()
    w = OomWatcher(lambda pid: pid in alive, kmsg_available=kmsg, clock=clock)
    w.observe({C1: CgroupLabels(C1_W, POD_W), POD: CgroupLabels(POD_W, POD_W)},
              {C1: [ProcessEntry(41, "EngineCore", 900), ProcessEntry(42, "APIServer", 100)]})
    return w, clock


def test_counters_read_at_start_are_history_and_only_rises_are_kills() -> None:
    w, clock = watcher()
    w.track({POD: (None, False)})
    assert w.check({POD: KillCounters(17)}) == []  # 17 kills before the exporter started
    clock.now += 1
    assert w.check({POD: KillCounters(17)}) == []
    clock.now += 10
    assert w.check({POD: KillCounters(17)}) == []  # however long it runs
    assert w.counts == {}
    kills = w.check({POD: KillCounters(18)}, [victim(C1, 41, "EngineCor")])
    assert [(k.process, k.pid, k.victim_source, k.workload) for k in kills] == [
        ("EngineCore", 41, "kmsg", C1_W)]  # the full name from the process table
    assert w.counts == {(POD_W, "EngineCore"): 1}


def test_a_young_domain_counts_its_first_read_and_waits_for_the_log() -> None:
    w, clock = watcher()
    w.check({}, [victim(C2, 77)])  # logged before its pod was followed
    clock.now += 1.5
    w.track({POD: (None, True)})  # appeared after the start: its counters start at 0
    kills = w.check({POD: KillCounters(1)})
    assert [(k.pid, k.victim_source, k.cgroup) for k in kills] == [(77, "kmsg", C2)]
    clock.now += 5
    assert w.check({POD: KillCounters(1)}) == []


def test_a_group_kill_is_one_kill_however_many_processes_it_took() -> None:
    w, clock = watcher()
    w.track({POD: (None, True)})
    kills = w.check({POD: KillCounters(3, 1)}, [victim(C1, 41)])
    assert len(kills) == 1
    clock.now += 3
    assert w.check({POD: KillCounters(3, 1)}) == []  # the other two were the same kill
    assert sum(w.counts.values()) == 1


def test_a_group_kill_read_while_the_kernel_counts_it_is_one_kill() -> None:
    """The kernel counts the victim's oom_kill, then the group, then each member's: reads
    in between (a busy node) see lone rises before and after the group's. Lone rises
    further apart are kills of their own."""
    w, clock = watcher()
    w.track({POD: (None, False)})
    w.check({POD: KillCounters(0, 0)})
    clock.now += 0.5
    first = w.check({POD: KillCounters(1, 0)}, [victim(C1, 41)])  # the victim, logged
    clock.now += 0.5
    assert w.check({POD: KillCounters(1, 1)}) == []  # its group: the same kill
    clock.now += 0.5
    assert w.check({POD: KillCounters(3, 1)}) == []  # its members: the same kill
    assert [k.victim_source for k in first] == ["kmsg"]
    assert sum(w.counts.values()) == 1
    clock.now += 60
    later = w.check({POD: KillCounters(4, 1)}, [victim(C1, 42)])  # a kill of its own
    clock.now += 60
    w.check({POD: KillCounters(4, 2)}, [victim(C1, 43)])  # a group kill read at once
    assert [k.pid for k in later] == [42]
    assert sum(w.counts.values()) == 3


def test_the_log_pid_never_names_a_process_outside_the_kill_cgroup() -> None:
    w, _ = watcher()
    w.track({POD: (None, True)})
    # pid 42 is in the pod, but the log puts the victim in C2: no name from C1's table
    kills = w.check({POD: KillCounters(1)}, [victim(C2, 42, "x")])
    assert [(k.process, k.pid, k.cgroup) for k in kills] == [("x", 42, C2)]


def test_v1_a_kill_logged_after_the_cgroup_went_is_counted_once_and_kept_on_the_pod() -> None:
    w, clock = watcher()
    w.track({C1: (POD, False)})
    w.check({C1: KillCounters(2)})  # two kills before the start: history, in the pod count
    assert w.tally().pod_level == {POD: 2}
    w.check({C1: KillCounters(3)}, [victim(C1, 41)])
    assert w.tally().pod_level == {POD: 3} and sum(w.counts.values()) == 1
    # A young container killed and removed before its counter was ever read:
    w.track({C2: (POD, True)}, labels={C2: CgroupLabels(Workload("ns", "vllm-0", "c2"),
                                                        POD_W)})
    w.check({}, [victim(C2, 90)])
    w.track({}, removed=[C2])
    clock.now += 2.5
    kills = w.check({})
    assert [(k.pid, k.victim_source, k.workload.container) for k in kills] == [
        (90, "kmsg", "c2")]
    assert w.tally().pod_level == {POD: 4} and sum(w.counts.values()) == 2
    # The same kill seen late by a counter (a read that raced the removal) is not another.
    clock.now += 1
    assert w.check({C2: KillCounters(1)}) == []
    assert w.tally().pod_level == {POD: 4} and sum(w.counts.values()) == 2


def test_without_the_kernel_log_the_largest_gone_process_is_a_guess() -> None:
    w, _ = watcher(kmsg=False, alive=frozenset({42}))
    w.track({POD: (None, False)})
    w.check({POD: KillCounters(0)})
    kills = w.check({POD: KillCounters(1)})
    assert [(k.process, k.pid, k.victim_source) for k in kills] == [("EngineCore", 41, "guess")]


def test_a_log_line_for_a_cgroup_headroom_does_not_follow_is_dropped() -> None:
    w, clock = watcher()
    w.check({}, [victim("system.slice/sshd.service", 5)])
    clock.now += RECENT + 1
    assert w.check({}) == [] and w.counts == {}


def test_kmsg_a_process_named_like_a_pid_cannot_steer_the_victim() -> None:
    spoof = OOM_KILL.replace("task=python,pid=26603", "task=x,pid=1,pid=26603")
    v = parse_kmsg_record(spoof)
    assert v is not None and (v.pid, v.comm) == (26603, "x,pid=1")
    killed = parse_kmsg_record(KILLED.replace("(python)", "(x,pid=1)"))
    assert killed is not None and killed.pid == 26603
    paired, held = pair_victims([v, killed])
    assert [(p.pid, p.memcg) for p in paired] == [(26603, v.memcg)] and held is None
    # The second line's pid wins over anything read from the first.
    forged = KernelVictim(1, "x", v.memcg, v.line)
    assert [p.pid for p in pair_victims([forged, killed])[0]] == [26603]
    # A summary whose second line has not been read yet waits for it.
    assert pair_victims([v]) == ([], v)


# --- without the kernel log: who left the domain (the sampler's member listing) ---------


def test_without_the_log_the_victim_is_the_largest_that_left_since_the_lower_read() -> None:
    w, clock = watcher(kmsg=False, alive=frozenset({41, 42, 43, 44}))
    w.track({POD: (None, False)})
    w.check({POD: KillCounters(0)}, members={C1: [ProcessEntry(43, "sidecar", 5000)]})
    # A big process exits normally before the kill counter's lower read: not the victim.
    clock.now += 0.2
    w.check({}, members={C1: []}, departed=[(C1, ProcessEntry(43, "sidecar", 5000))])
    clock.now += 0.2
    w.check({POD: KillCounters(0)}, members={C1: [ProcessEntry(44, "EngineCore", 800)]})
    # The counter rises; the victim is still dying: nobody has left yet, so no name ...
    clock.now += 0.2
    assert w.check({POD: KillCounters(1)}, members={C1: [ProcessEntry(44, "EngineCore", 800)]}
                   ) == []
    # ... until it leaves the listing, with a smaller process leaving in the same pass.
    clock.now += 0.2
    kills = w.check({}, members={C1: []}, departed=[(C1, ProcessEntry(44, "EngineCore", 800)),
                                                    (C1, ProcessEntry(45, "tokenizer", 90))])
    assert [(k.process, k.pid, k.victim_source, k.cgroup) for k in kills] == [
        ("EngineCore", 44, "guess", C1)]
    assert w.counts == {(POD_W, "EngineCore"): 1}


def test_without_the_log_a_kill_nobody_left_is_unknown_after_the_wait() -> None:
    w, clock = watcher(kmsg=False, alive=frozenset({41, 42}))
    w.track({POD: (None, True)})
    assert w.check({POD: KillCounters(1)}, members={C1: []}) == []
    clock.now += 10  # long past GUESS_WAIT, but the sampler has not run GUESS_PASSES times
    assert w.check({}, members={C1: []}) == []
    w.check({}, members={C1: []})
    kills = w.check({}, members={C1: []})
    assert [(k.process, k.victim_source) for k in kills] == [("unknown", "unknown")]


def test_the_member_table_lists_names_and_departures_within_its_bounds(tmp_path: Path) -> None:
    src = HOSTS / "v1-cgroupfs-containerd" / "proc"
    procfs = tmp_path / "proc"
    pids = sorted(int(e.name) for e in src.iterdir()
                  if (e / "status").is_file() and "RssAnon" in (e / "status").read_text())[:3]
    for pid in pids:
        shutil.copytree(src / str(pid), procfs / str(pid), symlinks=True)
    h = MemoryHierarchy(tmp_path / "memory", 1)
    (h.dir(C1)).mkdir(parents=True)
    procs = h.dir(C1) / "cgroup.procs"
    procs.write_text("".join(f"{pid}\n" for pid in pids) + "0\n999999\n")  # hidden, gone
    table = MemberTable(HostPaths(procfs=procfs))
    first = table.refresh(h, [C1])
    assert sorted(m.pid for m in first.members[C1]) == pids and first.departed == ()
    assert all(m.name and m.rss > 0 for m in first.members[C1])
    procs.write_text(f"{pids[0]}\n{pids[1]}\n")
    shutil.rmtree(procfs / str(pids[1]))  # listed, but gone from /proc: left too (at the
    left = table.refresh(h, [C1], urgent=lambda _: True)  # RSS read of a notified domain)
    assert sorted(e.pid for _, e in left.departed) == pids[1:]
    assert [m.pid for m in left.members[C1]] == [pids[0]]
    # A fork storm is read NEW_PER_PASS processes a pass (the rest on the next ones).
    procs.write_text("".join(f"{n}\n" for n in range(10**6, 10**6 + NEW_PER_PASS + 50)))
    storm = table.refresh(h, [C1])
    assert storm.members[C1] == ()  # none exists in /proc: read, found gone, not kept
    assert table.refresh(h, []).departed == ()  # the cgroup is no longer listed


def test_the_member_table_lists_a_cgroup_whose_usage_did_not_move_once_a_second(
        tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    src = HOSTS / "v1-cgroupfs-containerd" / "proc" / "4090"
    shutil.copytree(src, procfs / "4090", symlinks=True)
    h = MemoryHierarchy(tmp_path / "memory", 1)
    h.dir(C1).mkdir(parents=True)
    (h.dir(C1) / "cgroup.procs").write_text("4090\n")
    clock = Clock()
    table = MemberTable(HostPaths(procfs=procfs), clock=clock)
    assert [m.pid for m in table.refresh(h, [C1], usage={C1: 100}).members[C1]] == [4090]
    (h.dir(C1) / "cgroup.procs").write_text("")
    clock.now += 0.2
    assert table.refresh(h, [C1], usage={C1: 100}).departed == ()  # not listed: unmoved
    clock.now += 0.2
    assert [e.pid for _, e in table.refresh(h, [C1], usage={C1: 90}).departed] == [4090]


def test_each_kill_is_published_before_it_is_counted() -> None:
    """A scrape that sees the count move finds the kill's document (the cgroup v2 guest
    once found no document right after the counter moved)."""
    w, _ = watcher(kmsg=False)
    w.track({POD: (None, True)})
    seen: list[tuple[str, dict[tuple[Workload, str], int]]] = []

    def publish(k: OomKill) -> None:
        seen.append((k.process, dict(w.counts)))
        if k.pid == 41:
            raise OSError("disk full")  # a failed document still counts the kill
    kills = w.check({POD: KillCounters(1)}, publish=publish)
    assert seen == [("EngineCore", {})]  # not counted while its document was written
    assert [k.pid for k in kills] == [41] and w.counts == {(POD_W, "EngineCore"): 1}
