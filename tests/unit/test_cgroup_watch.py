"""Finding cgroups between scrapes (exporter/sampling/cgroup_watch.py) on a directory tree shaped
like a kubelet's: the same answers from inotify and from the scan. inotify reports mkdir
on any filesystem, so this runs without root; the real cgroupfs (v1 and v2) is covered
by tests/kernel/test_kernel_kills.py."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from exporter.collectors.kill_counters import KillCounters
from exporter.host.paths import MemoryHierarchy
from exporter.sampling.cgroup_watch import CgroupTree
from exporter.sampling.kill_domains import Domain
from exporter.sampling.sampler import PeakSampler, Sample

CID = "ab" * 32


@pytest.fixture(params=["inotify", "scan"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(tmp_path: Path, mode: str, now: list[float]) -> CgroupTree:
    return CgroupTree(MemoryHierarchy(tmp_path, 2), "kubepods",
                      use_inotify=mode == "inotify", scan_interval=1.0,
                      clock=lambda: now[0])


def test_pods_and_containers_found_removed_and_marked_young(tmp_path: Path, mode: str) -> None:
    now = [0.0]
    old_uid = str(uuid.uuid4())
    (tmp_path / f"kubepods/burstable/pod{old_uid}/{CID}").mkdir(parents=True)
    (tmp_path / "kubepods/besteffort").mkdir()
    t = make(tmp_path, mode, now)
    first = t.refresh()
    assert {r.path for r in first.added} == {f"kubepods/burstable/pod{old_uid}",
                                             f"kubepods/burstable/pod{old_uid}/{CID}"}
    assert not any(t.young(r.path) for r in first.added)  # there when the exporter started
    assert not t.refresh()
    # A new Guaranteed pod (directly under kubepods) and a container in it, then a
    # container in a new QoS-level pod: all found by the next refresh (a tick).
    uid = str(uuid.uuid4())
    (tmp_path / f"kubepods/pod{uid}").mkdir()
    (tmp_path / f"kubepods/pod{uid}/{CID}").mkdir()
    (tmp_path / f"kubepods/besteffort/pod{uid[::-1]}").mkdir()  # not a uid: ignored
    now[0] += 1.0
    got = t.refresh()
    ref = {r.path: r for r in got.added}
    assert set(ref) == {f"kubepods/pod{uid}", f"kubepods/pod{uid}/{CID}"}
    c = ref[f"kubepods/pod{uid}/{CID}"]
    assert (c.pod_uid, c.container_id, c.qos) == (uid, CID, "guaranteed")
    assert t.young(c.path) and t.young(f"kubepods/pod{uid}")
    # The container exits and the runtime removes its cgroup, then the pod goes.
    (tmp_path / f"kubepods/pod{uid}/{CID}").rmdir()
    now[0] += 1.0
    assert t.refresh().removed == (f"kubepods/pod{uid}/{CID}",)
    (tmp_path / f"kubepods/pod{uid}").rmdir()
    (tmp_path / f"kubepods/burstable/pod{old_uid}/{CID}").rmdir()
    (tmp_path / f"kubepods/burstable/pod{old_uid}").rmdir()
    now[0] += 1.0
    assert set(t.refresh().removed) == {f"kubepods/pod{uid}",
                                        f"kubepods/burstable/pod{old_uid}/{CID}",
                                        f"kubepods/burstable/pod{old_uid}"}
    assert t.refs == {}
    t.close()


def test_kubepods_appearing_later_is_picked_up(tmp_path: Path, mode: str) -> None:
    now = [0.0]
    t = make(tmp_path, mode, now)
    assert not t.refresh()  # no kubelet yet
    uid = str(uuid.uuid4())
    (tmp_path / f"kubepods/burstable/pod{uid}/{CID}").mkdir(parents=True)
    now[0] += 1.0
    added = t.refresh().added
    assert len(added) == 2
    assert all(t.young(r.path) for r in added)  # created after the exporter started
    t.close()


def test_scan_mode_lists_at_its_interval_only(tmp_path: Path) -> None:
    now = [0.0]
    (tmp_path / "kubepods").mkdir()
    t = make(tmp_path, "scan", now)
    t.refresh()
    uid = str(uuid.uuid4())
    (tmp_path / f"kubepods/pod{uid}").mkdir()
    now[0] += 0.5
    assert not t.refresh()  # half an interval: not listed yet
    now[0] += 0.5
    assert [r.path for r in t.refresh().added] == [f"kubepods/pod{uid}"]
    assert t.mode == "scan"


def test_inotify_mode_sees_a_change_without_waiting_for_an_interval(tmp_path: Path) -> None:
    now = [0.0]
    (tmp_path / "kubepods").mkdir()
    t = make(tmp_path, "inotify", now)
    assert t.mode == "inotify" and t.fileno() is not None
    t.refresh()
    uid = str(uuid.uuid4())
    (tmp_path / f"kubepods/pod{uid}").mkdir()
    assert [r.path for r in t.refresh().added] == [f"kubepods/pod{uid}"]  # same instant
    t.close()


def write_cgroup(d: Path, usage: int, kills: int = 0) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "memory.current").write_text(f"{usage}\n")
    (d / "memory.peak").write_text(f"{usage}\n")
    (d / "memory.events").write_text(
        f"low 0\nhigh 0\nmax 0\noom 0\noom_kill {kills}\noom_group_kill 0\n")


def test_the_sampler_samples_a_new_container_on_its_next_tick_without_a_scrape(
        tmp_path: Path) -> None:
    """The sampler's own listing: a container that appears is sampled on the next tick,
    its pod's kill counter followed (young: it started at zero after the sampler did),
    and a notified counter rise reaches the listener, all with no scrape at all."""
    uid = str(uuid.uuid4())
    old = tmp_path / f"kubepods/burstable/pod{uid}"
    write_cgroup(old, 10 << 20, kills=4)  # 4 kills before the start: history
    samples: list[Sample] = []
    h = MemoryHierarchy(tmp_path, 2)
    s = PeakSampler(0.2, 30.0, listener=samples.append,
                    watch_root=lambda: (h, "kubepods"))
    s.sample_once()
    assert samples[-1].added == {f"kubepods/burstable/pod{uid}": Domain(None, False)}
    assert samples[-1].counters[f"kubepods/burstable/pod{uid}"].oom_kill == 4
    new_uid = str(uuid.uuid4())
    pod = tmp_path / f"kubepods/pod{new_uid}"
    write_cgroup(pod, 5 << 20)
    write_cgroup(pod / CID, 5 << 20)
    s.sample_once()
    last = samples[-1]
    assert {r.path for r in last.found} == {f"kubepods/pod{new_uid}",
                                            f"kubepods/pod{new_uid}/{CID}"}
    assert last.added == {f"kubepods/pod{new_uid}": Domain(None, True)}
    assert last.usage[f"kubepods/pod{new_uid}/{CID}"] == 5 << 20
    assert s.peak(f"kubepods/pod{new_uid}/{CID}") == 5 << 20
    s.sample_once()
    assert samples[-1].counters == {}  # nothing moved: no counter read at all
    write_cgroup(pod, 60 << 20, kills=1)  # the kernel's notification: memory.events moved
    s.sample_once()
    assert samples[-1].counters == {f"kubepods/pod{new_uid}": KillCounters(1, 0)}
    s.stop()
