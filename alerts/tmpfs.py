"""The shared-memory alerts: a pod's memory-backed tmpfs (/dev/shm, emptyDir medium
Memory) predicted to fill (node-mixin's NodeFilesystemSpaceFillingUp), and files in it
that no live process holds.
"""

from __future__ import annotations

from exporter import catalog as c
from exporter import promql as q
from exporter.promql import Config, duration, expr, number

from .build import Rule, alerting_rule, held, hysteresis


def shared_memory_filling_up(config: Config) -> Rule:
    w = config.shm_fill_window_s
    name = "HeadroomSharedMemoryFillingUp"
    full = 1 - config.shm_fill_max_free_ratio
    # The trend is the lasting group's (TMPFS_PREDICTED), held through one of its
    # intervals; the fill level and the size are the minute's.
    fire = expr(
        """
        ${used} / ${size} > ${full}
        and
        last_over_time(${predicted}[${hold}]) > ${size}
        """,
        used=q.TMPFS_USED, size=q.TMPFS_SIZE, full=round(full, 6),
        predicted=q.TMPFS_PREDICTED, hold=duration(config.lasting_hold_s),
    )
    clear = f"{q.TMPFS_USED} / {q.TMPFS_SIZE} > {number(round(full - 0.1, 6))}"
    condition = hysteresis(config, name, "warning", fire, clear,
                           (*config.group_labels, "mount"))
    return alerting_rule(
        config, name, condition, "warning",
        config.shm_fill_for_s,
        "tmpfs {{ $labels.mount }} of {{ $labels.namespace }}/{{ $labels.pod }} is "
        f"predicted to fill within {duration(config.shm_fill_horizon_s)}.",
        "{{ $labels.mount }} of pod {{ $labels.namespace }}/{{ $labels.pod }} is "
        "{{ $value | humanizePercentage }} full and has grown steadily over the last "
        f"{duration(w)}. Its pages are shmem, charged to the pod's memory and never "
        "reclaimed: writers get ENOSPC when it fills, and the pod is OOM-killed first if "
        "its memory limit is smaller than the mount.",
    )


def stale_shared_memory(config: Config) -> Rule:
    name = "HeadroomStaleSharedMemory"
    orphaned = held(config, c.TMPFS_ORPHANED_BYTES, (*config.group_labels, "mount"))
    condition = hysteresis(
        config, name, "warning", f"{orphaned} > {config.stale_shm_min_bytes}",
        f"{orphaned} > {config.stale_shm_min_bytes // 2}", (*config.group_labels, "mount"))
    return alerting_rule(
        config, name, condition, "warning", config.stale_shm_for_s,
        "{{ $value | humanize1024 }}B of files in {{ $labels.mount }} of "
        "{{ $labels.namespace }}/{{ $labels.pod }} belong to no live process.",
        "Files in the memory-backed tmpfs {{ $labels.mount }} of pod "
        "{{ $labels.namespace }}/{{ $labels.pod }} hold {{ $value | humanize1024 }}B that "
        "no live process of the pod has open or mapped: typically left by a killed or "
        "restarted container. They stay charged to the pod's memory (shmem, never "
        "reclaimed without swap) until deleted or the pod goes.",
    )
