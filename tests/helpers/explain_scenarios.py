"""Scenario pods for ``headroom explain``, as the exporter would have exported them.

Each scenario is one pod over a few days, modelled as the kernel accounts memory (reusing
the rules' model in ``alerts.scenarios.series``: process anon and mapped shmem, shmem no process
maps, kernel memory, page cache squeezed as the rest grows), plus the series the rules'
scenarios do not need: every kind of ``headroom_memory_bytes``, the pod's tmpfs with its
orphaned bytes, and vLLM's KV-cache tiers. ``openmetrics`` writes them as an OpenMetrics
file that ``promtool tsdb create-blocks-from openmetrics`` turns into TSDB blocks ending
at ``end`` (now, in the tests), so a real Prometheus answers explain's queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from alerts.scenarios import series as s
from alerts.scenarios.series import Cgroup, with_page_cache
from exporter import catalog as c

GiB, MiB = s.GiB, s.MiB
HOUR, DAY = 3600, 86400
NAMESPACE = "llm"
INSTANCE = "node-1:9847"


@dataclass(frozen=True)
class State:
    """One container at one instant, with what the rules' Cgroup does not model."""

    cg: Cgroup
    tmpfs: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)
    # medium -> (capacity bytes, usage ratio); prefix-cache blocks per medium
    kv: Mapping[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class ExplainScenario:
    name: str
    pod: str
    span_s: int  # history before the moment explain judges
    step_s: int
    containers: Mapping[str, Callable[[int], State]]
    pod_limit: float
    # Charged to the pod cgroup only (reparented after a container died) and the pod's
    # /dev/shm: (used, size, orphaned) at time t.
    pod_shm: Callable[[int], tuple[float, float, float]] | None = None
    # What explain must say.
    verdict: str = "healthy"
    binding: str = "vllm"
    kind: str | None = None  # the growing kind
    process: str | None = None  # the growing process
    cause: str | None = None
    setting: str | None = None


def _kinds(cg: Cgroup) -> dict[str, float]:
    anon = sum(a for a, _ in cg.procs.values())
    shm = sum(sh for _, sh in cg.procs.values()) + cg.shmem_unmapped
    return {"anon": anon, "shmem": shm, "kernel": cg.kernel, "sock": 0.0,
            "unaccounted": 0.0, "file_active": cg.file_active,
            "file_inactive": cg.file_inactive}


def samples(sc: ExplainScenario, end: float) -> Iterator[tuple[str, dict[str, str], float,
                                                               float]]:
    """(metric, labels, value, timestamp) for every sample of the scenario, the last at
    ``end``."""
    for t in range(0, sc.span_s + 1, sc.step_s):
        ts = end - (sc.span_s - t)
        states = {name: fn(t) for name, fn in sc.containers.items()}
        members = [st.cg for st in states.values()]
        extra_shm = sc.pod_shm(t) if sc.pod_shm else None
        # The pod cgroup holds every container's charges, plus what its dead containers
        # left behind (reparented to it) and a little of its own kernel memory.
        pod_kinds = {k: sum(_kinds(m)[k] for m in members) for k in _kinds(members[0])}
        pod_kinds["shmem"] += extra_shm[0] if extra_shm else 0.0
        pod_kinds["kernel"] += 16 * MiB
        pod = Cgroup(sc.pod_limit, {"": (pod_kinds["anon"], 0.0)},
                     shmem_unmapped=pod_kinds["shmem"],
                     kernel=pod_kinds["kernel"], file_active=pod_kinds["file_active"],
                     file_inactive=pod_kinds["file_inactive"])
        rows = [("", pod, pod_kinds), *((n, st.cg, _kinds(st.cg)) for n, st in states.items())]
        for container, cg, kinds in rows:
            w = {"namespace": NAMESPACE, "pod": sc.pod, "container": container}
            yield c.MEMORY_LIMIT_BYTES.name, w, cg.limit, ts
            yield c.MEMORY_USAGE_BYTES.name, w, cg.usage, ts
            yield c.MEMORY_WORKING_SET_BYTES.name, w, cg.working_set, ts
            yield c.MEMORY_UNRECLAIMABLE_BYTES.name, w, cg.unreclaimable, ts
            yield c.MEMORY_EVENTS_TOTAL.name, {**w, "event": "max"}, cg.events_max, ts
            for kind, v in kinds.items():
                yield c.MEMORY_BYTES.name, {**w, "kind": kind}, v, ts
            for proc, (anon, shm) in cg.procs.items() if container else ():
                yield (c.PROCESS_MEMORY_BYTES.name, {**w, "process": proc, "kind": "rss_anon"},
                       anon, ts)
                yield (c.PROCESS_MEMORY_BYTES.name,
                       {**w, "process": proc, "kind": "rss_shmem"}, shm, ts)
        pw = {"namespace": NAMESPACE, "pod": sc.pod, "container": ""}
        yield c.OOM_KILLS_TOTAL.name, {**pw, "process": "unknown"}, 0.0, ts
        if extra_shm is not None:
            used, size, orphaned = extra_shm
            m = {**pw, "mount": "/dev/shm"}
            yield c.TMPFS_USED_BYTES.name, m, used, ts
            yield c.TMPFS_SIZE_BYTES.name, m, size, ts
            yield "headroom_tmpfs_orphaned_bytes", m, orphaned, ts
        for name, st in states.items():
            w = {"namespace": NAMESPACE, "pod": sc.pod, "container": name}
            for mount, (used, size, orphaned) in st.tmpfs.items():
                m = {**pw, "mount": mount}  # tmpfs series are pod-level (the contract)
                yield c.TMPFS_USED_BYTES.name, m, used, ts
                yield c.TMPFS_SIZE_BYTES.name, m, size, ts
                yield "headroom_tmpfs_orphaned_bytes", m, orphaned, ts
            for medium, (cap, ratio) in st.kv.items():
                k = {**w, "model_name": "llama", "engine": "0", "medium": medium}
                yield c.VLLM_KV_CACHE_CAPACITY_BYTES.name, k, cap, ts
                yield c.VLLM_KV_CACHE_USAGE_RATIO.name, k, ratio, ts


def _labels(labels: Mapping[str, str]) -> str:
    full = {"job": "headroom", "instance": INSTANCE, **labels}
    return ",".join(f'{k}="{v}"' for k, v in full.items())


def openmetrics(scs: list[ExplainScenario], end: float) -> str:
    """One OpenMetrics text for every scenario: samples grouped by metric family, each
    series in time order (what promtool's importer wants), ending with ``# EOF``."""
    by_metric: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for sc in scs:
        for metric, labels, value, ts in samples(sc, end):
            by_metric.setdefault(metric, {}).setdefault(_labels(labels), []).append(
                (ts, value))
    out: list[str] = []
    for metric in sorted(by_metric):
        out.append(f"# TYPE {metric} gauge")
        for labels, points in by_metric[metric].items():
            out += [f"{metric}{{{labels}}} {v:.17g} {ts:.3f}" for ts, v in points]
    out.append("# EOF")
    return "\n".join(out) + "\n"


# --- the scenarios ----------------------------------------------------------------------------
SPAN = 2 * DAY + 12 * HOUR  # two full days for the floor's rise, and some more
STEP = 10 * 60
BASE = {"APIServer": (1.5 * GiB, 0.0), "EngineCore": (3 * GiB, 0.0),
        "Worker_TP0": (6 * GiB, 2 * GiB)}


def _state(limit: float, procs: Mapping[str, tuple[float, float]], unmapped: float = 0.0,
           cache: float = 4 * GiB) -> Cgroup:
    cg = Cgroup(limit, dict(procs), shmem_unmapped=unmapped)
    return with_page_cache(cg, wanted=cache, active_ws=cg.unreclaimable + GiB)


def shm_leftover() -> ExplainScenario:
    """Each crash of a worker leaves its /dev/shm files behind: 2 GiB a day of files no
    process holds, charged to the pod cgroup (the container cgroup they were charged to is
    gone). The vllm container itself is flat."""
    limit = 32 * GiB
    rate = 2 * GiB / DAY

    def vllm(t: int) -> State:
        return State(_state(limit, BASE))

    def shm(t: int) -> tuple[float, float, float]:
        left = 3 * GiB + rate * t
        return left + 64 * MiB, 16 * GiB, left

    return ExplainScenario("shm-leftover", "vllm-shm-0", SPAN, STEP, {"vllm": vllm}, limit,
                           pod_shm=shm, verdict="at_risk", binding="", kind="shmem",
                           cause="stale_shm")


def kv_offload() -> ExplainScenario:
    """vLLM's CPU KV-offload tier (/dev/shm/vllm_offload_*.mmap, mapped by the worker)
    fills: 24 GiB set, 10% in use two and a half days ago, filling 3 GiB a day; what is
    still to fill is larger than the pod's headroom."""
    limit = 32 * GiB
    tier = 24 * GiB
    rate = 3 * GiB / DAY

    def resident(t: int) -> float:
        return min(tier, 0.1 * tier + rate * t)

    def vllm(t: int) -> State:
        procs = {**BASE, "Worker_TP0": (6 * GiB, 2 * GiB + resident(t))}
        return State(_state(limit, procs, cache=6 * GiB),
                     tmpfs={"/dev/shm": (resident(t) + 64 * MiB, 32 * GiB, 0.0)},
                     kv={"cpu": (tier, resident(t) / tier), "gpu": (40 * GiB, 0.6)})

    return ExplainScenario("kv-offload", "vllm-kv-0", SPAN, STEP, {"vllm": vllm}, limit,
                           verdict="at_risk", kind="shmem", process="Worker_TP0",
                           cause="kv_offload", setting="--kv-offloading-size")


def engine_leak() -> ExplainScenario:
    """EngineCore leaks 2 GiB of anon a day; the API server swings with diurnal load."""
    limit = 24 * GiB
    rate = 2 * GiB / DAY

    def vllm(t: int) -> State:
        procs = {"APIServer": (s.diurnal(t, 1.0 * GiB, 1.5 * GiB), 0.0),
                 "EngineCore": (3 * GiB + rate * t, 0.0), "Worker_TP0": (6 * GiB, 2 * GiB)}
        return State(_state(limit, procs))

    return ExplainScenario("engine-leak", "vllm-engine-0", SPAN, STEP, {"vllm": vllm}, limit,
                           verdict="at_risk", kind="anon", process="EngineCore",
                           cause="anon_leak")


def worker_leak() -> ExplainScenario:
    """Worker_TP1 of a TP=2 pod leaks 1.5 GiB of anon a day; Worker_TP0 is flat."""
    limit = 32 * GiB
    rate = 1.5 * GiB / DAY

    def vllm(t: int) -> State:
        procs = {**BASE, "Worker_TP0": (6 * GiB, 2 * GiB),
                 "Worker_TP1": (6 * GiB + rate * t, 2 * GiB)}
        return State(_state(limit, procs))

    return ExplainScenario("worker-leak", "vllm-worker-0", SPAN, STEP, {"vllm": vllm}, limit,
                           verdict="at_risk", kind="anon", process="Worker_TP1",
                           cause="anon_leak")


def healthy() -> ExplainScenario:
    """Healthy: EngineCore swings 8-12 GiB with daily traffic, nothing lasts."""
    limit = 32 * GiB

    def vllm(t: int) -> State:
        procs = {"APIServer": (s.diurnal(t, 2 * GiB, 3 * GiB), 0.0),
                 "EngineCore": (s.diurnal(t, 8 * GiB, 12 * GiB), 0.0),
                 "Worker_TP0": (6 * GiB, 4 * GiB)}
        return State(_state(limit, procs, cache=s.diurnal(t, 2 * GiB, 4 * GiB)),
                     tmpfs={"/dev/shm": (256 * MiB, 16 * GiB, 0.0)})

    return ExplainScenario("healthy", "vllm-ok-0", SPAN, STEP, {"vllm": vllm}, limit)


def page_cache_growth() -> ExplainScenario:
    """Page cache grows from 2 to 14 GiB (weights and logs read over and over);
    unreclaimable memory is flat: nothing is at risk."""
    limit = 32 * GiB

    def vllm(t: int) -> State:
        cg = Cgroup(limit, dict(BASE))
        cache = 2 * GiB + 12 * GiB * t / SPAN
        return State(Cgroup(limit, dict(BASE), kernel=cg.kernel, file_active=cache * 0.6,
                            file_inactive=cache * 0.4))

    return ExplainScenario("page-cache", "vllm-cache-0", SPAN, STEP, {"vllm": vllm}, limit)


def sidecar_leak() -> ExplainScenario:
    """Pod-level limit only: a cache-daemon sidecar leaks; each container looks fine but
    the pod cgroup reaches its limit (the rules' pod-level scenario)."""
    limit = 40 * GiB
    rate = 2.5 * GiB / DAY

    def vllm(t: int) -> State:
        return State(_state(limit, {"APIServer": (1.5 * GiB, 0.0),
                                    "EngineCore": (5 * GiB, 0.0),
                                    "Worker_TP0": (7.5 * GiB, 4 * GiB)}, cache=2 * GiB))

    def sidecar(t: int) -> State:
        return State(Cgroup(limit, {"cache-daemon": (6 * GiB + rate * t, 0.0)}, kernel=0))

    return ExplainScenario("sidecar-leak", "vllm-side-0", SPAN, STEP,
                           {"vllm": vllm, "sidecar": sidecar}, limit, verdict="at_risk",
                           binding="", kind="anon", process="cache-daemon",
                           cause="anon_leak")


def mm_cache() -> ExplainScenario:
    """The multimodal processor cache of type shm in /dev/shm, one per API server and
    engine, grows as new images arrive: /dev/shm grows, its files mapped by live
    processes (no orphan), and no KV-offload tier is configured."""
    limit = 24 * GiB
    rate = 1.5 * GiB / DAY

    def vllm(t: int) -> State:
        cache = 0.5 * GiB + rate * t / 2
        procs = {"APIServer": (1.5 * GiB, cache), "EngineCore": (3 * GiB, cache * 1.01),
                 "Worker_TP0": (6 * GiB, 2 * GiB)}
        return State(_state(limit, procs),
                     tmpfs={"/dev/shm": (2 * cache + 64 * MiB, 16 * GiB, 0.0)},
                     kv={"gpu": (40 * GiB, 0.5)})

    return ExplainScenario("mm-cache", "vllm-mm-0", SPAN, STEP, {"vllm": vllm}, limit,
                           verdict="at_risk", kind="shmem", process="EngineCore",
                           cause="mm_shm_cache", setting="--mm-processor-cache-gb")


def pinned_host() -> ExplainScenario:
    """Worker_TP0 maps more and more shared memory with no tmpfs growing: CUDA pinned
    host memory (counted as shmem)."""
    limit = 24 * GiB
    rate = 1.5 * GiB / DAY

    def vllm(t: int) -> State:
        procs = {**BASE, "Worker_TP0": (6 * GiB, 4 * GiB + rate * t)}
        return State(_state(limit, procs), tmpfs={"/dev/shm": (64 * MiB, 16 * GiB, 0.0)})

    return ExplainScenario("pinned-host", "vllm-pin-0", SPAN, STEP, {"vllm": vllm}, limit,
                           verdict="at_risk", kind="shmem", process="Worker_TP0",
                           cause="pinned_host", setting="--kv-offloading-size")


ALL: tuple[Callable[[], ExplainScenario], ...] = (
    shm_leftover, kv_offload, engine_leak, worker_leak, healthy, page_cache_growth,
    sidecar_leak, mm_cache, pinned_host,
)
