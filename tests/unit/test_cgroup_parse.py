"""Tier 1: the cgroup parsers against literal file contents."""

from __future__ import annotations

import pytest

from exporter.collectors.cgroup_parse import (
    RawCgroup,
    parse_cgroup,
    parse_limit,
    parse_pressure,
    partition,
)

MiB = 1 << 20
NODE = 64 * 1024 * MiB

V2_STAT = """anon 104857600
file 335544320
kernel 20971520
kernel_stack 1048576
pagetables 2097152
sec_pagetables 0
percpu 524288
sock 4096
vmalloc 0
shmem 52428800
file_mapped 1048576
file_dirty 0
inactive_anon 157286400
active_anon 0
inactive_file 209715200
active_file 73400320
unevictable 0
slab_reclaimable 8388608
slab_unreclaimable 8912896
slab 17301504
"""
V2_USAGE = 104857600 + 335544320 + 20971520 + 4096 + 123  # + a residual


def v2(**kw: object) -> RawCgroup:
    base: dict[str, object] = {
        "version": 2, "usage": f"{V2_USAGE}\n", "stat": V2_STAT, "limits": ("max\n",),
        "events": "low 0\nhigh 3\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n",
        "pressure": "some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\n"
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n",
        "swap_current": "0\n",
    }
    base.update(kw)
    return RawCgroup(**base)  # type: ignore[arg-type]


def test_v2_partition_sums_to_usage_and_names_each_kind() -> None:
    m = parse_cgroup(v2(), NODE)
    assert m.usage == V2_USAGE
    assert sum(m.kinds.values()) == m.usage
    assert m.kinds["anon"] == 100 * MiB
    assert m.kinds["shmem"] == 50 * MiB
    assert m.kinds["file_active"] == 70 * MiB
    assert m.kinds["file_inactive"] == 200 * MiB
    assert m.kinds["kernel"] == 20 * MiB
    assert m.kinds["sock"] == 4096
    # file (320 MiB) = shmem 50 + active 70 + inactive 200: nothing left over but the 123.
    assert m.kinds["unaccounted"] == 123


def test_v2_unreclaimable_and_working_set() -> None:
    m = parse_cgroup(v2(), NODE)
    assert m.unreclaimable == V2_USAGE - 70 * MiB - 200 * MiB - 8 * MiB
    assert m.working_set == V2_USAGE - 200 * MiB


def test_v2_events_pressure_swap() -> None:
    m = parse_cgroup(v2(), NODE)
    assert m.events == {"low": 0, "high": 3, "max": 17, "oom": 1, "oom_kill": 1,
                        "oom_group_kill": 0}
    assert m.pressure == {"some": 2.5, "full": 0.001}
    assert m.swap == 0


def test_v2_memory_qos_is_exported_only_where_set() -> None:
    """Kubernetes MemoryQoS: memory.high written only when configured (else ``max``),
    memory.min from the requests (else ``0``); the high event count comes with events."""
    unset = parse_cgroup(v2(high="max\n", min="0\n", low="0\n"), NODE)
    assert (unset.high, unset.min, unset.low) == (None, None, None)
    absent = parse_cgroup(v2(), NODE)  # an older kernel, or v1: no such files
    assert (absent.high, absent.min, absent.low) == (None, None, None)
    m = parse_cgroup(v2(high=f"{900 * MiB}\n", min=f"{512 * MiB}\n", low=f"{600 * MiB}\n"),
                     NODE)
    assert (m.high, m.min, m.low) == (900 * MiB, 512 * MiB, 600 * MiB)
    assert m.events["high"] == 3


def test_v2_without_psi_swap_events() -> None:
    m = parse_cgroup(v2(pressure=None, swap_current=None, events=None), NODE)
    assert m.pressure == {}
    assert m.swap is None
    assert m.events == {}


def test_v2_old_kernel_without_kernel_key_sums_the_parts() -> None:
    stat = "\n".join(line for line in V2_STAT.splitlines() if not line.startswith("kernel "))
    m = parse_cgroup(v2(stat=stat), NODE)
    parts = 1048576 + 2097152 + 0 + 524288 + 0 + 17301504
    assert m.kinds["kernel"] == parts
    assert sum(m.kinds.values()) == m.usage


def test_effective_limit_is_the_smallest_on_the_path() -> None:
    m = parse_cgroup(v2(limits=("max\n", f"{8 * 1024 * MiB}\n", "max\n",
                                f"{16 * 1024 * MiB}\n")), NODE)
    assert m.limit == 8 * 1024 * MiB
    assert parse_cgroup(v2(limits=("max\n",)), NODE).limit == NODE
    # A limit above node memory is no limit at all.
    assert parse_cgroup(v2(limits=(f"{NODE * 2}\n",)), NODE).limit == NODE


def test_stat_drift_above_usage_keeps_the_partition_exact_and_non_negative() -> None:
    stat = {"anon": 100, "shmem": 10, "active_file": 5, "inactive_file": 3, "kernel": 7}
    kinds = partition(120, stat, 2, None)  # stat says 125, usage says 120
    assert sum(kinds.values()) == 120
    assert min(kinds.values()) >= 0
    assert kinds["file_inactive"] == 0 and kinds["file_active"] == 3
    assert kinds["anon"] == 100 and kinds["unaccounted"] == 0


V1_STAT = """cache 1268617216
rss 1826816
shmem 0
mapped_file 16384
swap 0
inactive_anon 1810432
active_anon 12288
inactive_file 1061974016
active_file 206643200
unevictable 0
hierarchical_memory_limit 536870912
hierarchical_memsw_limit 9223372036854771712
total_cache 1268617216
total_rss 1826816
total_shmem 0
total_swap 4096
total_inactive_anon 1810432
total_active_anon 12288
total_inactive_file 1061974016
total_active_file 206643200
"""


def test_v1_figures_from_a_real_memory_stat() -> None:
    # Numbers read off this machine's v1 memory controller (usage, stat, kmem usage).
    raw = RawCgroup(version=1, usage="1349615616\n", stat=V1_STAT, limits=(),
                    failcnt="17820\n",
                    oom_control="oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
                    kmem_usage="79028224\n")
    m = parse_cgroup(raw, NODE)
    assert m.limit == 512 * MiB  # hierarchical_memory_limit
    assert m.kinds["anon"] == 1826816
    assert m.kinds["kernel"] == 79028224
    assert "sock" not in m.kinds  # v1 does not charge sockets to memory.usage_in_bytes
    assert m.kinds["unaccounted"] == 1349615616 - 1826816 - 1061974016 - 206643200 - 79028224
    assert sum(m.kinds.values()) == m.usage
    assert m.events == {"max": 17820, "oom_kill": 2}
    assert m.swap == 4096
    assert m.working_set == 1349615616 - 1061974016
    assert m.pressure == {}


def test_v1_unlimited_is_node_memory() -> None:
    stat = V1_STAT.replace("hierarchical_memory_limit 536870912",
                           "hierarchical_memory_limit 9223372036854771712")
    raw = RawCgroup(version=1, usage="100\n", stat=stat, limits=())
    assert parse_cgroup(raw, NODE).limit == NODE


@pytest.mark.parametrize(("text", "expected"), [
    ("max\n", None), ("", None), ("1073741824\n", 1 << 30),
    ("9223372036854771712\n", None),
])
def test_parse_limit(text: str, expected: int | None) -> None:
    assert parse_limit(text) == expected


def test_parse_pressure_ignores_blank_lines() -> None:
    assert parse_pressure("\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=7\n") == {
        "some": 7e-6
    }


def test_parse_stat_reads_what_parse_flat_keyed_reads() -> None:
    from exporter.collectors.cgroup_parse import parse_flat_keyed, parse_stat

    for text, version in ((V1_STAT, 1), (V2_STAT, 2)):
        full = parse_flat_keyed(text)
        picked = parse_stat(text, version)  # type: ignore[arg-type]
        assert picked and all(full[k] == v for k, v in picked.items())
    # a key that is a prefix of another must not match it
    assert parse_stat("anon_thp 5\nanon 7\n", 2) == {"anon": 7}
