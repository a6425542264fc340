"""OOM kills joined like any source: the watcher's tally is a result under its key; the
join labels the per-process counts and, on v1, gives a pod-level cgroup its containers'
kills (the kernel counts a kill only in the victim's own cgroup there)."""

from __future__ import annotations

from exporter.assembly.factory import Exporter
from exporter.collectors import cgroup
from exporter.collectors.cgroup import CgroupData
from exporter.collectors.meminfo import NodeMemory
from exporter.contract.source import Result, Results
from exporter.exposition.join import join
from exporter.model import CgroupMemory, CgroupRef, Workload
from exporter.oom import tally
from exporter.oom.tally import KillTally
from tests.conftest import exposition, fixture_pipeline, host_config, parse_exposition

POD = "kubepods/burstable/pod1234"
CONTAINER = f"{POD}/abcdef"
REFS = (CgroupRef(POD, pod_uid="1234"), CgroupRef(CONTAINER, pod_uid="1234",
                                                  container_id="abcdef"))


def memory(oom_kill: int) -> CgroupMemory:
    return CgroupMemory(usage=10, limit=100, working_set=10, kinds={"anon": 10},
                        unreclaimable=10, swap=None, events={"max": 3, "oom_kill": oom_kill},
                        pressure={})


def results(kills: KillTally | None) -> Results:
    data = CgroupData({POD: memory(0), CONTAINER: memory(2)}, NodeMemory(1000, 500))
    out = Results().with_data(cgroup.KEY.name, data)
    return out.with_data(tally.KEY.name, kills)


def events(kills: KillTally | None) -> dict[str, dict[str, int]]:
    snap = join(REFS, None, results(kills), {}, [])
    return {ws.ref.path: dict(ws.memory.events) for ws in snap.workloads if ws.memory}


def test_v1_pod_level_oom_kill_is_its_containers_kills() -> None:
    got = events(KillTally({}, {POD: 3}))
    assert got[POD] == {"max": 3, "oom_kill": 3}
    assert got[CONTAINER] == {"max": 3, "oom_kill": 2}  # the kernel's own, untouched


def test_without_a_pod_level_count_the_kernels_figures_stand() -> None:
    """v2 (the kernel's pod-level count is hierarchical) or no OOM watcher at all."""
    assert events(KillTally()) == events(None)
    assert events(None)[POD] == {"max": 3, "oom_kill": 0}


def test_the_per_process_counts_are_the_snapshots() -> None:
    w = Workload("", "1234", "")
    snap = join(REFS, None, results(KillTally({(w, "EngineCore"): 1})), {}, [])
    assert snap.oom_kills == {(w, "EngineCore"): 1}
    assert join(REFS, None, results(None), {}, []).oom_kills == {}


async def test_the_pipeline_joins_the_watchers_tally(make_pipeline: list[Exporter]) -> None:
    """Through the real pipeline on the v1 tree: the tally is read before the join, the
    pod level shows its containers' kills, the per-process counter the watcher's."""
    uid = "9b2f4a60-3f4e-4f8e-8d2b-0a1c2d3e4f50"
    p = fixture_pipeline(host_config("v1-cgroupfs-containerd"))
    make_pipeline.append(p)
    pod = Workload("", uid, "")
    counted = KillTally({(pod, "EngineCore"): 2}, {f"kubepods/pod{uid}": 2})
    p.postmortem.collect = lambda: Result(counted)  # type: ignore[method-assign]
    values = parse_exposition(await exposition(p))
    labels = f'namespace="",pod="{uid}",container=""'
    assert values[f'headroom_memory_events_total{{{labels},event="oom_kill"}}'] == 2
    assert values[f'headroom_oom_kills_total{{{labels},process="EngineCore"}}'] == 2
    assert 'headroom_collector_success{collector="oom"}' not in values  # not a collector
