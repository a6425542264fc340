"""promtool cases of the alerts on other signals than a cgroup's memory: tmpfs filling up
and stale shared memory, vLLM's KV offload tier, OOM kills, node memory pressure and the
exporter's own health (``alerts/tmpfs.py``, ``vllm.py``, ``oom.py``, ``node.py``,
``meta.py``)."""

from __future__ import annotations

from exporter import catalog as c
from exporter.catalog import TMPFS_ORPHANED_BYTES
from exporter.collectors import cgroup, nvml
from exporter.promql import MINUTE, Config, MiB

from .promtool_series import (
    GiB,
    Test,
    alert_labels,
    boundary,
    dur,
    firing_expr,
    linear,
    series,
    steps,
    whole,
    workload,
)

NVML, CGROUP = nvml.SPEC.name, cgroup.SPEC.name


def shm(cfg: Config) -> Test:
    # /dev/shm grows 10 MiB/min; its size drops from 64 GiB to 3 GiB at minute 420
    # (used is then 70%, predicted past the size within a day).
    on = 420
    total = on + 120
    size_after = 3 * GiB
    labels = {**workload(container=""), "mount": "/dev/shm"}
    return {
        "name": "HeadroomSharedMemoryFillingUp: for elapses",
        "interval": "1m",
        "input_series": [
            series(c.TMPFS_USED_BYTES.name, linear(0, 10 * MiB, total + 1),
                   **labels),
            series(c.TMPFS_SIZE_BYTES.name, steps((64 * GiB, on), (size_after, total + 1 - on)),
                   **labels),
            series("up", f"1x{total}"),
        ],
        "promql_expr_test": boundary("HeadroomSharedMemoryFillingUp", "warning", "",
                                     on * MINUTE + cfg.shm_fill_for_s),
    }


def kv_offload(cfg: Config) -> Test:
    # Pod p: 16 GiB tier, 10% in use (14.4 GiB pending); the container's limit drops at
    # minute 30 to leave 10 GiB. Pod q: the container has room, the pod cgroup (shmem
    # left by a dead container) does not: caught through the join on the pod.
    on = 30
    n = 90
    fires = on * MINUTE + cfg.kv_offload_for_s
    kv = {"model_name": "m", "engine": "0", "medium": c.MEDIUM_CPU}
    inputs = [
        series(c.MEMORY_LIMIT_BYTES.name, steps((128 * GiB, on), (40 * GiB, n + 1 - on)),
               **workload()),
        series(c.MEMORY_UNRECLAIMABLE_BYTES.name, f"{30 * GiB}x{n}", **workload()),
        series(c.MEMORY_LIMIT_BYTES.name, f"{128 * GiB}x{n}", **workload(container="")),
        series(c.MEMORY_UNRECLAIMABLE_BYTES.name, f"{30 * GiB}x{n}", **workload(container="")),
        series(c.VLLM_KV_CACHE_CAPACITY_BYTES.name, f"{16 * GiB}x{n}", **workload(), **kv),
        series(c.VLLM_KV_CACHE_USAGE_RATIO.name, f"0.1x{n}", **workload(), **kv),
        series(c.MEMORY_LIMIT_BYTES.name, f"{64 * GiB}x{n}", **workload("q")),
        series(c.MEMORY_UNRECLAIMABLE_BYTES.name, f"{30 * GiB}x{n}", **workload("q")),
        series(c.MEMORY_LIMIT_BYTES.name, steps((128 * GiB, on), (64 * GiB, n + 1 - on)),
               **workload("q", "")),
        series(c.MEMORY_UNRECLAIMABLE_BYTES.name, f"{54 * GiB}x{n}", **workload("q", "")),
        series(c.VLLM_KV_CACHE_CAPACITY_BYTES.name, f"{16 * GiB}x{n}", **workload("q"), **kv),
        series(c.VLLM_KV_CACHE_USAGE_RATIO.name, f"0.1x{n}", **workload("q"), **kv),
        series("up", f"1x{n}"),
    ]
    expr = firing_expr("HeadroomKVOffloadWillNotFit").replace("container)", "container, pod)")
    both = [{"labels": '{alertname="HeadroomKVOffloadWillNotFit", container="vllm", '
                       f'pod="{p}", severity="warning"}}', "value": 1} for p in ("p", "q")]
    return {
        "name": "HeadroomKVOffloadWillNotFit: container and pod-level headroom",
        "interval": "1m",
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": expr, "eval_time": dur(fires - MINUTE), "exp_samples": []},
            {"expr": expr, "eval_time": dur(fires), "exp_samples": both},
            {"expr": 'headroom:vllm_kv_offload_pending:bytes{pod="p"}', "eval_time": "5m",
             "exp_samples": [{"labels": 'headroom:vllm_kv_offload_pending:bytes'
                                        '{container="vllm", namespace="ns", pod="p"}',
                              "value": 16 * GiB * (1 - 0.1)}]},
        ],
    }


def oom(cfg: Config) -> Test:
    # Pod p: the watcher's zero-initialised counter rises to 1 at minute 20; at minute 30
    # a series that is merely new appears at 1 (a restarted exporter re-reporting an old
    # kill): not a kill. Pod q (cgroup v1): only the container's oom_kill counter rises,
    # at minute 40; the pod-level one never moves on v1.
    n = 70
    w = dur(cfg.oom_window_s)
    return {
        "name": "HeadroomPodOOMKilled: a rise counts, a new series does not; v1 counters",
        "interval": "1m",
        "input_series": [
            series(c.OOM_KILLS_TOTAL.name, f"0x19 1x{n - 20}", **workload(container=""),
                   process="EngineCore"),
            series(c.OOM_KILLS_TOTAL.name, f"_x30 1x{n - 30}", **workload(container=""),
                   process="Worker_TP0"),
            series(c.MEMORY_EVENTS_TOTAL.name, f"0x39 1x{n - 40}", **workload("q"),
                   event=c.EVENT_OOM_KILL),
            series(c.MEMORY_EVENTS_TOTAL.name, f"0x{n}", **workload("q", ""),
                   event=c.EVENT_OOM_KILL),
            series("up", f"1x{n}"),
        ],
        "promql_expr_test": [
            {"expr": firing_expr("HeadroomPodOOMKilled"), "eval_time": "19m",
             "exp_samples": []},
            {"expr": firing_expr("HeadroomPodOOMKilled"), "eval_time": "20m",
             "exp_samples": [{"labels": alert_labels("HeadroomPodOOMKilled", "warning", None),
                              "value": 1}]},
            # The re-reported series never fires, not even after the real one resolved.
            {"expr": 'count(ALERTS{alertname="HeadroomPodOOMKilled", process="Worker_TP0"})'
                     ' or vector(0)',
             "eval_time": "35m", "exp_samples": [{"labels": "{}", "value": 0}]},
            {"expr": 'count(ALERTS{alertname="HeadroomPodOOMKilled", pod="p"}) or vector(0)',
             "eval_time": dur(20 * MINUTE + cfg.oom_window_s + MINUTE),
             "exp_samples": [{"labels": "{}", "value": 0}]},
            {"expr": 'count(ALERTS{alertname="HeadroomPodOOMKilled", pod="q"})',
             "eval_time": "39m", "exp_samples": []},
            {"expr": 'count(ALERTS{alertname="HeadroomPodOOMKilled", pod="q"})',
             "eval_time": "40m", "exp_samples": [{"labels": "{}", "value": 1}]},
        ],
        "alert_rule_test": [{
            "eval_time": "21m",
            "alertname": "HeadroomPodOOMKilled",
            "exp_alerts": [{
                "exp_labels": {"severity": "warning", "namespace": "ns", "pod": "p",
                               "process": "EngineCore"},
                "exp_annotations": {
                    "summary": "A process of ns/p was OOM-killed.",
                    "description": (
                        f"The kernel OOM-killed EngineCore in pod ns/p (1 kill(s) in the "
                        f"last {w}). Open headroom's OOM post-mortem for what grew before it."
                    ),
                    "runbook_url": cfg.runbook_url("HeadroomPodOOMKilled"),
                },
            }],
        }],
    }


def stale_shm(cfg: Config) -> Test:
    # 32 MiB orphaned (below the minimum) for 10 minutes, then 2 GiB from minute 10.
    n = 10 + cfg.stale_shm_for_s // MINUTE + 10
    labels = {**workload(container=""), "mount": "/dev/shm"}
    return {
        "name": "HeadroomStaleSharedMemory: orphaned tmpfs bytes held",
        "interval": "1m",
        "input_series": [
            series(TMPFS_ORPHANED_BYTES.name, steps((32 * MiB, 10), (2 * GiB, n - 10)), **labels),
            series("up", f"1x{n}"),
        ],
        "promql_expr_test": boundary("HeadroomStaleSharedMemory", "warning", None,
                                     10 * MINUTE + cfg.stale_shm_for_s),
        "alert_rule_test": [{
            "eval_time": dur(10 * MINUTE + cfg.stale_shm_for_s),
            "alertname": "HeadroomStaleSharedMemory",
            "exp_alerts": [{
                # Prometheus drops the empty container label of the pod level.
                "exp_labels": {"severity": "warning", "namespace": "ns", "pod": "p",
                               "mount": "/dev/shm"},
                "exp_annotations": {
                    "summary": "2GiB of files in /dev/shm of ns/p belong to no live process.",
                    "description": (
                        "Files in the memory-backed tmpfs /dev/shm of pod ns/p hold 2GiB "
                        "that no live process of the pod has open or mapped: typically "
                        "left by a killed or restarted container. They stay charged to "
                        "the pod's memory (shmem, never reclaimed without swap) until "
                        "deleted or the pod goes."
                    ),
                    "runbook_url": cfg.runbook_url("HeadroomStaleSharedMemory"),
                },
            }],
        }],
    }


def node_pressure(cfg: Config) -> Test:
    # A 64 GiB node: MemAvailable flat at 8 GiB for an hour (below 10 % but not
    # falling), then falling 64 MiB a minute: predicted to cross the eviction threshold
    # within the horizon once it is below 64 MiB * 60 + threshold. A pod without a
    # limit (its limit is the node's memory) grows; a pod with a limit of 0 never divides.
    node = 64 * GiB
    n = 180
    flat = 60
    per_min = 64 * MiB
    avail = f"{whole(8 * GiB)}x{flat - 1} {whole(8 * GiB)}-{per_min}x{n - flat}"
    return {
        "name": "HeadroomNodeMemoryPressure: MemAvailable falling toward eviction",
        "interval": "1m",
        "input_series": [
            series(c.NODE_MEMORY_TOTAL_BYTES.name, f"{whole(node)}x{n}"),
            series(c.NODE_MEMORY_AVAILABLE_BYTES.name, avail),
            series(c.MEMORY_LIMIT_BYTES.name, f"{whole(node)}x{n}", **workload("free", "")),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name,
                   f"{whole(20 * GiB)}x{flat - 1} {whole(20 * GiB)}+{per_min}x{n - flat}",
               **workload("free", "")),
            series(c.MEMORY_LIMIT_BYTES.name, f"0x{n}", **workload("zero")),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, f"{whole(GiB)}x{n}", **workload("zero")),
            series("up", f"1x{n}"),
        ],
        "promql_expr_test": [
            {"expr": firing_expr("HeadroomNodeMemoryPressure"), "eval_time": dur(flat * MINUTE),
             "exp_samples": []},
            {"expr": firing_expr("HeadroomNodeMemoryPressure"), "eval_time": dur(n * MINUTE),
             "exp_samples": [{"labels": alert_labels("HeadroomNodeMemoryPressure", "critical",
                                                     None), "value": 1}]},
            # A limit of 0 is dropped, never divided by.
            {"expr": 'headroom:memory_unreclaimable:ratio{pod="zero"}', "eval_time": "10m",
             "exp_samples": []},
            {"expr": 'count(ALERTS{pod="zero"}) or vector(0)', "eval_time": dur(n * MINUTE),
             "exp_samples": [{"labels": "{}", "value": 0}]},
        ],
    }


def meta(cfg: Config) -> Test:
    n = 90
    down_at = 10
    fail_at = 30
    # avg_over_time over the window drops below 0.5 once more than half the samples in
    # [t - window, t] (both ends included) are 0.
    window_samples = cfg.collector_window_s // MINUTE + 1
    below = fail_at + window_samples // 2  # first minute with a zero majority
    return {
        "name": "meta-monitoring: exporter, collector, vLLM scrape",
        "interval": "1m",
        "input_series": [
            series("up", f"1x{down_at - 1} 0x{n - down_at}"),
            series(c.COLLECTOR_SUCCESS.name, f"1x{fail_at - 1} 0x{n - fail_at}", collector=NVML),
            series(c.COLLECTOR_SUCCESS.name, f"1x{n}", collector=CGROUP),
            series(c.VLLM_UP.name, f"1x{fail_at - 1} 0x{n - fail_at}", **workload()),
        ],
        "promql_expr_test": [
            *boundary("HeadroomExporterDown", "warning", None,
                      down_at * MINUTE + cfg.exporter_down_for_s),
            *boundary("HeadroomCollectorFailing", "warning", None,
                      below * MINUTE + cfg.collector_for_s),
            *boundary("HeadroomVLLMScrapeFailing", "warning", "vllm",
                      below * MINUTE + cfg.vllm_scrape_for_s),
        ],
    }
