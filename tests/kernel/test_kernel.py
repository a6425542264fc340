"""Tier 3: the real kernel, cgroup v1 and v2 alike. Memory cgroups shaped like a kubelet's,
created beneath this test's own cgroup; a child grows anon, shmem and page cache; the
exporter's figures must match what was allocated (within 5%); a burst between two scrapes
shows in the peak; a child in a 64 MiB limit is really OOM-killed and counted.

The same tests run on the host's kernel (v1 on this CI machine) and, through
``tests/kernel/test_v2_guest.py``, on Debian's kernel booted with a pure v2 hierarchy
(``scripts/v2-guest.py``). Where the versions differ, each test says what it expects of
each: v2's pod-level ``memory.events`` is hierarchical and outlives a killed container,
v2 has PSI per cgroup, v1 counts a kill only in the victim's own cgroup."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import select
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.assembly import factory
from exporter.assembly.config import (
    DiscoverySettings,
    ExporterConfig,
    PathSettings,
    RecorderSettings,
    SamplerSettings,
)
from exporter.assembly.factory import Exporter as Pipeline
from exporter.host.paths import FdBudget
from exporter.sampling import cadence
from exporter.sampling.usage_events import UsageThresholds
from tests.conftest import exposition, parse_exposition
from tests.helpers.kernel import Grower, KubeTree, oom_kills

pytestmark = pytest.mark.kernel

MiB = 1 << 20


def make_pipeline(tree: KubeTree, sampler_interval: float = 0.2,
                  flight_recorder_dir: Path | None = None, sampler_window: float = 30.0,
                  kmsg: Path | None = Path("/dev/kmsg")) -> Pipeline:
    """The real exporter on this kernel, started (its sampler runs)."""
    cfg = ExporterConfig(collectors=frozenset({"cgroup", "procfs", "tmpfs"})).with_settings(
        DiscoverySettings(kubepods_path=tree.kubepods, host_vllm=False),  # hermetic
        SamplerSettings(interval=sampler_interval, window=sampler_window),
        PathSettings(kmsg=kmsg),
        RecorderSettings(dir=flight_recorder_dir),
    )
    exporter = factory.build(cfg)
    exporter.start()
    return exporter


@dataclass
class Scrape:
    values: dict[str, float]
    pod: str
    container: str

    def get(self, name: str, container: bool = True, **labels: str) -> float:
        want = {"pod": self.pod, "container": self.container if container else "", **labels}
        hits = [v for k, v in self.values.items()
                if k.startswith(name + "{") and all(f'{lk}="{lv}"' in k for lk, lv in
                                                    want.items())]
        assert len(hits) == 1, (name, want, len(hits))
        return hits[0]

    def kind(self, kind: str, container: bool = True) -> float:
        return self.get("headroom_memory_bytes", container, kind=kind)

    def kinds(self, container: bool = True) -> dict[str, float]:
        """Every kind the exporter reported (v2 adds ``sock``; v1 may lack ``kernel``)."""
        want = f'pod="{self.pod}",container="{self.container if container else ""}"'
        out = {}
        for k, v in self.values.items():
            if k.startswith("headroom_memory_bytes{") and want in k:
                out[k.split('kind="', 1)[1].split('"', 1)[0]] = v
        return out

    def has(self, name: str, container: bool = True) -> bool:
        want = f'pod="{self.pod}",container="{self.container if container else ""}"'
        return any(k.startswith(name + "{") and want in k for k in self.values)


async def scrape(p: Pipeline, pod_uid: str, cid: str) -> Scrape:
    return Scrape(parse_exposition(await exposition(p)), pod_uid, cid[:12])


def near(actual: float, expected: float, rel: float = 0.05) -> bool:
    return abs(actual - expected) <= rel * expected


async def test_anon_shmem_page_cache_match_what_was_allocated(
        tree: KubeTree, pipelines: list[Pipeline]) -> None:
    uid, pod = tree.pod(limit=1024 * MiB)
    cid, container = tree.container(pod)
    p = make_pipeline(tree)
    pipelines.append(p)
    g = Grower(tree.hierarchy, container)
    shm_name = f"headroom-test-{cid[:8]}"
    tree.shm_files.append(Path("/dev/shm") / shm_name)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        try:
            s0 = await scrape(p, uid, cid)
            g.send("anon 200")
            s1 = await scrape(p, uid, cid)
            g.send(f"shm 100 {shm_name}")
            s2 = await scrape(p, uid, cid)
            g.send(f"file 150 {tmp}/pagecache")
            s3 = await scrape(p, uid, cid)
        finally:
            g.close()

    name = os.path.basename(sys.executable)
    anon_d = s1.kind("anon") - s0.kind("anon")
    shmem_d = s2.kind("shmem") - s1.kind("shmem")
    file_d = (s3.kind("file_active") + s3.kind("file_inactive")
              - s2.kind("file_active") - s2.kind("file_inactive"))
    print(f"\nanon +{anon_d / MiB:.1f} MiB (200 allocated), shmem +{shmem_d / MiB:.1f} MiB "
          f"(100), file +{file_d / MiB:.1f} MiB (150)")
    # anon: the cgroup's anon kind and the process's RssAnon both grew by 200 MiB
    assert near(s1.kind("anon") - s0.kind("anon"), 200 * MiB)
    rss_anon = "headroom_process_memory_bytes"
    assert near(s1.get(rss_anon, process=name, kind="rss_anon")
                - s0.get(rss_anon, process=name, kind="rss_anon"), 200 * MiB)
    # shmem: an unmapped /dev/shm file is in the cgroup's shmem, in no process's RSS
    assert near(s2.kind("shmem") - s1.kind("shmem"), 100 * MiB)
    assert s2.get(rss_anon, process=name, kind="rss_shmem") < 5 * MiB
    assert s2.get("headroom_tmpfs_used_bytes", container=False, mount="/dev/shm") >= 95 * MiB
    # page cache: 150 MiB of file pages, read twice so most are active
    file_delta = (s3.kind("file_active") + s3.kind("file_inactive")
                  - s2.kind("file_active") - s2.kind("file_inactive"))
    assert near(file_delta, 150 * MiB)
    # unreclaimable counts anon and shmem, not page cache
    assert near(s2.get("headroom_memory_unreclaimable_bytes")
                - s0.get("headroom_memory_unreclaimable_bytes"), 300 * MiB)
    assert abs(s3.get("headroom_memory_unreclaimable_bytes")
               - s2.get("headroom_memory_unreclaimable_bytes")) < 15 * MiB
    for s in (s0, s1, s2, s3):
        for level in (True, False):  # the container and its pod-level cgroup
            kinds = s.kinds(level)
            assert {"anon", "shmem", "file_active", "file_inactive", "unaccounted"} <= set(kinds)
            assert sum(kinds.values()) == s.get("headroom_memory_usage_bytes", level)
    assert s3.get("headroom_memory_limit_bytes") == 1024 * MiB  # the pod's limit
    assert s3.get("headroom_memory_usage_bytes", container=False) >= s3.get(
        "headroom_memory_usage_bytes")


async def wait_samples(p: Pipeline, n: int) -> None:
    assert p.sampler is not None
    target = p.sampler.samples_taken + n
    deadline = time.monotonic() + 60  # generous: the sampler thread may be starved
    while time.monotonic() < deadline:
        if p.sampler.samples_taken >= target:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("sampler is not sampling")


async def around_a_burst(tree: KubeTree, pipelines: list[Pipeline], sampler_interval: float,
                         samples: int, burst: str) -> tuple[Scrape, Scrape]:
    """Scrapes of a fresh container before and after a grower's ``burst`` command, with
    ``samples`` sampler passes between each scrape and the burst."""
    uid, pod = tree.pod(limit=1024 * MiB)
    cid, container = tree.container(pod)
    p = make_pipeline(tree, sampler_interval=sampler_interval)
    pipelines.append(p)
    g = Grower(tree.hierarchy, container)
    try:
        s0 = await scrape(p, uid, cid)
        await wait_samples(p, samples)
        g.send(burst)  # returns once the memory is freed again
        await wait_samples(p, samples)
        s1 = await scrape(p, uid, cid)
    finally:
        g.close()
    return s0, s1


async def test_a_300ms_burst_between_two_scrapes_shows_in_the_peak(
        tree: KubeTree, pipelines: list[Pipeline]) -> None:
    s0, s1 = await around_a_burst(tree, pipelines, 0.2, 2, "burst 200 300")
    base = s0.get("headroom_memory_usage_bytes")
    assert s1.get("headroom_memory_usage_bytes") < base + 20 * MiB  # gone by the scrape
    assert s1.get("headroom_memory_peak_bytes") >= base + 190 * MiB  # but not missed
    assert s1.get("headroom_memory_peak_bytes", container=False) >= base + 190 * MiB


async def test_a_burst_shorter_than_the_sampling_interval_is_caught(
        tree: KubeTree, pipelines: list[Pipeline]) -> None:
    """50 ms at a 1 s interval: the kernel's lifetime peak rose, so the window has it."""
    s0, s1 = await around_a_burst(tree, pipelines, 1.0, 1, "burst 150 50")
    base = s0.get("headroom_memory_usage_bytes")
    assert s1.get("headroom_memory_peak_bytes") >= base + 140 * MiB


async def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60  # generous: the sampler thread may be starved
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_an_idle_cgroup_that_ramps_is_read_fast_in_time_to_catch_its_peak(
        tree: KubeTree, pipelines: list[Pipeline]) -> None:
    """Far from its limit and still, a cgroup is read once a second; a ramp switches it to
    every tick. The peak here sets no new lifetime high (an earlier burst did, and has left
    the 3 s window), so only the sampler's own readings can show it."""
    uid, pod = tree.pod(limit=1024 * MiB)
    cid, container = tree.container(pod)
    p = make_pipeline(tree, sampler_interval=0.2, sampler_window=3.0)
    pipelines.append(p)
    sampler = p.sampler
    assert sampler is not None
    g = Grower(tree.hierarchy, container)
    path = container
    try:
        s0 = await scrape(p, uid, cid)
        base = s0.get("headroom_memory_usage_bytes")
        g.send("burst 300 100")  # the lifetime peak: base + 300 MiB
        await wait_until(lambda: sampler.is_fast(path), "a lifetime peak rise not seen")
        await wait_until(lambda: not sampler.is_fast(path), "never went back to slow")
        await asyncio.sleep(3.5)  # the burst leaves the window
        assert (sampler.peak(path) or 0) < base + 100 * MiB
        for _ in range(8):  # 200 MiB in about 1.5 s, below the lifetime peak
            g.send("anon 25")
            await asyncio.sleep(0.15)
        fast_at_top = sampler.is_fast(path)
        await asyncio.sleep(0.6)  # the top, held 0.6 s: a slow pace may read it or not
        g.send("free")
        await wait_samples(p, 2)
        s1 = await scrape(p, uid, cid)
    finally:
        g.close()
    assert fast_at_top
    assert s1.get("headroom_memory_usage_bytes") < base + 20 * MiB
    assert s1.get("headroom_memory_peak_bytes") >= base + 190 * MiB


async def test_a_still_cgroup_is_read_at_the_quiet_pace_and_a_rising_one_fast(
        tree: KubeTree, pipelines: list[Pipeline]) -> None:
    """Still and far below its limit, a cgroup whose climb the kernel watches (v1: its
    usage threshold is armed; v2: its lifetime peak is below the zone that kills) is read
    once per quiet period. When it starts rising it is read every tick, and the top of a
    short burst towards its limit is in the peak."""
    uid, pod = tree.pod(limit=512 * MiB)
    cid, container = tree.container(pod)
    g = Grower(tree.hierarchy, container)  # before the exporter starts: not young
    try:
        g.send("anon 20")
        p = make_pipeline(tree, sampler_interval=0.2, sampler_window=30.0)
        pipelines.append(p)
        sampler = p.sampler
        await wait_until(lambda: sampler.is_quiet(container), "never at the quiet pace")
        await asyncio.sleep(3 * cadence.QUIET)
        assert sampler.is_quiet(container) and not sampler.is_fast(container)
        seconds = [t for t, _ in p.postmortem.recorder.history(container)["usage"]]
        gaps = [b - a for a, b in itertools.pairwise(seconds[1:])]
        assert len(gaps) >= 1 and min(gaps) >= 2, seconds  # none a second apart
        s0 = await scrape(p, uid, cid)
        g.send("anon 40")  # a ramp, still under half the limit: no threshold crossed
        await wait_until(lambda: sampler.is_fast(container), "a ramp not read fast")
        assert not sampler.is_quiet(container)
        g.send("burst 380 300")  # 440 MiB for 0.3 s: 86% of the limit
        await wait_samples(p, 2)
        s1 = await scrape(p, uid, cid)
    finally:
        g.close()
    base = s0.get("headroom_memory_usage_bytes")
    assert s1.get("headroom_memory_usage_bytes") < base + 60 * MiB  # the burst is over
    assert s1.get("headroom_memory_peak_bytes") >= base + 40 * MiB + 370 * MiB


def test_v1_a_usage_threshold_wakes_the_sampler_when_crossed(tree: KubeTree) -> None:
    """The kernel's own wake-up for a slow cgroup climbing towards its limit (v1 only:
    v2 has no usage threshold, nothing is armed there)."""
    _, pod = tree.pod(limit=1024 * MiB)
    _, container = tree.container(pod)
    thresholds = UsageThresholds(tree.hierarchy)
    g = Grower(tree.hierarchy, container)
    try:
        fd = thresholds.arm(container, 100 * MiB)
        if tree.version == 2:
            assert fd is None
            return
        assert fd is not None
        assert thresholds.arm(container, 100 * MiB) is None  # the same: nothing new
        assert UsageThresholds(tree.hierarchy, FdBudget(0)).arm(container, 100 * MiB) is None
        ep = select.epoll()
        ep.register(fd, select.EPOLLIN)
        assert ep.poll(0) == []
        g.send("anon 150")
        deadline = time.monotonic() + 60
        while not ep.poll(0.1):
            assert time.monotonic() < deadline, "the threshold never fired"
        assert thresholds.ready(fd) == container
        assert ep.poll(0) == []  # reset by ready: the next crossing wakes it again
        ep.close()
    finally:
        g.close()
        thresholds.close()


@pytest.mark.parametrize("kmsg", [True, False], ids=["kmsg", "no-kmsg"])
async def test_a_child_in_a_64mib_limit_is_oom_killed_and_counted(
        tree: KubeTree, pipelines: list[Pipeline], tmp_path: Path, kmsg: bool) -> None:
    uid, pod = tree.pod(limit=1024 * MiB)
    cid, container = tree.container(pod, limit=64 * MiB)
    p = make_pipeline(tree, flight_recorder_dir=tmp_path / "oom",
                      kmsg=Path("/dev/kmsg") if kmsg else None)
    pipelines.append(p)
    g = Grower(tree.hierarchy, container)
    try:
        s0 = await scrape(p, uid, cid)
        await wait_samples(p, 2)  # the watcher has read the counters once
        g.send("grow 8 10", wait=False)
        rc = await asyncio.to_thread(g.wait, 60)
    finally:
        g.close()
    assert rc == -9  # SIGKILL from the OOM killer: exit code 137 in a container
    assert oom_kills(tree.hierarchy, container) == 1  # the kernel's own count
    s1 = await scrape(p, uid, cid)
    assert s0.get("headroom_memory_events_total", event="oom_kill") == 0
    assert s1.get("headroom_memory_events_total", event="oom_kill") == 1
    # reclaim at the limit: v2 memory.events max, v1 memory.failcnt
    assert s1.get("headroom_memory_events_total", event="max") > 0
    assert s1.get("headroom_memory_limit_bytes") == 64 * MiB
    if tree.version == 2:
        # The kill stalled the container on reclaim first: PSI per cgroup (v2 only).
        assert s1.get("headroom_memory_pressure_seconds_total", level="some") > 0
        # v2 memory.events is hierarchical: the pod-level cgroup counts it too.
        assert s1.get("headroom_memory_events_total", container=False, event="oom_kill") == 1
    else:
        assert not s1.has("headroom_memory_pressure_seconds_total")
    # The OOM watcher counts the kill on the pod, with the victim's process name ...
    name = os.path.basename(sys.executable)
    deadline = time.monotonic() + 60  # generous: a busy machine, not a claim
    while True:
        # every kill series: nothing from the host (its vLLMs, its cgroups) is tracked
        kills = {k: v for k, v in s1.values.items() if k.startswith("headroom_oom_kills_total")}
        if kills or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
        s1 = await scrape(p, uid, cid)
    assert kills == {f'headroom_oom_kills_total{{namespace="",pod="{uid}",container="",'
                     f'process="{name}"}}': 1}
    # ... and the flight recorder kept the minutes before it, naming the victim: written
    # before the kill is counted, so it is there once the count shows.
    docs = list((tmp_path / "oom").glob("*.json"))
    assert len(docs) == 1
    doc = json.loads(docs[0].read_text())
    assert doc["victim"]["process"] == name
    assert doc["victim"]["pid"] == g.proc.pid
    assert doc["victim"]["source"] == ("kmsg" if kmsg else "guess")
    assert doc["pod"] == uid and doc["container"] == cid[:12]
    assert max(v for _, v in doc["usage"]) >= 60 * MiB  # the climb to the limit
    assert doc["scrapes"] and doc["scrapes"][-1]["limit"] == 64 * MiB
    assert p.postmortem is not None
    assert p.postmortem.list_documents() == [docs[0].name]
    if tree.version == 2:
        # The runtime removes the killed container's cgroup; the pod-level memory.events
        # keeps the kill (what the dashboards' pod-level OOM count reads).
        tree.remove(container)
        s2 = await scrape(p, uid, cid)
        assert not s2.has("headroom_memory_usage_bytes")  # the container is gone
        assert s2.get("headroom_memory_events_total", container=False, event="oom_kill") == 1


async def test_memory_qos_knobs_and_the_high_event(
        tree: KubeTree, pipelines: list[Pipeline]) -> None:
    """Kubernetes MemoryQoS on v2: memory.high, memory.min and memory.low exported where
    set (absent where not: the pod level here), and ``high`` counting the kernel's reclaim
    above memory.high (page cache over it: reclaimed without throttling). v1 has none."""
    uid, pod = tree.pod(limit=1024 * MiB)
    cid, container = tree.container(pod)
    d = tree.hierarchy.dir(container)
    if tree.version == 2:
        (d / "memory.high").write_text(str(32 * MiB))
        (d / "memory.min").write_text(str(8 * MiB))
        (d / "memory.low").write_text(str(16 * MiB))
    p = make_pipeline(tree)
    pipelines.append(p)
    g = Grower(tree.hierarchy, container)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        try:
            s0 = await scrape(p, uid, cid)
            g.send(f"file 64 {tmp}/pagecache")
            s1 = await scrape(p, uid, cid)
        finally:
            g.close()
    knobs = ("headroom_memory_high_bytes", "headroom_memory_min_bytes",
             "headroom_memory_low_bytes")
    if tree.version == 1:
        assert not any(s1.has(k, level) for k in knobs for level in (True, False))
        return
    assert [s1.get(k) for k in knobs] == [32 * MiB, 8 * MiB, 16 * MiB]
    assert not any(s1.has(k, container=False) for k in knobs)  # unset on the pod
    high = "headroom_memory_events_total"
    assert s1.get(high, event="high") > s0.get(high, event="high")
    assert s1.get("headroom_memory_usage_bytes") <= 40 * MiB  # held near memory.high
