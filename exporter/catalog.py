"""Every metric headroom exports: name, type, labels and help, in one place.

The renderer, the dashboards (``dashboards/``) and the rules (``alerts/``) all import
their names from here, so a metric cannot be renamed without them following.
Names are the full exposition names (counters end in ``_total``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "info"]

# The workload label set: cAdvisor's names, so joins with kube-state-metrics work.
WORKLOAD_LABELS: tuple[str, ...] = ("namespace", "pod", "container")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str

    @property
    def family(self) -> str:
        """The name prometheus_client wants for the family (counters without ``_total``)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        if self.type == "info" and self.name.endswith("_info"):
            return self.name[: -len("_info")]
        return self.name


W = WORKLOAD_LABELS

# --- cgroup memory -----------------------------------------------------------------
MEMORY_LIMIT_BYTES = MetricSpec(
    "headroom_memory_limit_bytes", "gauge", W,
    "Effective hard memory limit: the smallest limit on the cgroup's path to the root "
    "(node memory when no cgroup sets one).",
)
MEMORY_USAGE_BYTES = MetricSpec(
    "headroom_memory_usage_bytes", "gauge", W,
    "Memory charged to the cgroup: memory.current (v2) or memory.usage_in_bytes (v1).",
)
MEMORY_WORKING_SET_BYTES = MetricSpec(
    "headroom_memory_working_set_bytes", "gauge", W,
    "usage - inactive_file, floored at 0: the kubelet's working set, for comparison.",
)
MEMORY_BYTES = MetricSpec(
    "headroom_memory_bytes", "gauge", (*W, "kind"),
    "A partition of usage by kind: anon, shmem (tmpfs, /dev/shm, pinned host memory), "
    "file_active, file_inactive, kernel, sock (v2) and unaccounted (the residual, so "
    "the kinds sum to usage exactly).",
)
MEMORY_UNRECLAIMABLE_BYTES = MetricSpec(
    "headroom_memory_unreclaimable_bytes", "gauge", W,
    "Memory the kernel cannot reclaim without swap: usage - active_file - inactive_file "
    "- slab_reclaimable (anon, shmem, unevictable, unreclaimable kernel memory and the "
    "residual). This is the figure that reaches the limit before an OOM kill.",
)
MEMORY_PEAK_BYTES = MetricSpec(
    "headroom_memory_peak_bytes", "gauge", W,
    "Highest usage over a trailing window (--sampler.window): usage sampled every "
    "--sampler.interval, raised to the kernel's lifetime peak (memory.peak / "
    "memory.max_usage_in_bytes) whenever that rose between two samples, so bursts "
    "shorter than the interval count too.",
)
MEMORY_EVENTS_TOTAL = MetricSpec(
    "headroom_memory_events_total", "counter", (*W, "event"),
    "Memory events from memory.events (v2: low, high, max, oom, oom_kill, oom_group_kill; "
    "hierarchical). On v1, max is memory.failcnt and oom_kill comes from memory.oom_control; "
    "a v1 pod-level oom_kill is its containers' kills (v1 counts none there), kept after a "
    "container's cgroup is removed.",
)
MEMORY_PRESSURE_SECONDS_TOTAL = MetricSpec(
    "headroom_memory_pressure_seconds_total", "counter", (*W, "level"),
    "Time tasks of the cgroup stalled on memory (PSI memory.pressure, cgroup v2), by level "
    "(some, full).",
)
MEMORY_HIGH_BYTES = MetricSpec(
    "headroom_memory_high_bytes", "gauge", W,
    "memory.high where set (cgroup v2; Kubernetes MemoryQoS writes it when configured): "
    "above it the kernel throttles and reclaims the cgroup (memory.events high counts it) "
    "instead of killing; absent when unset (max).",
)
MEMORY_MIN_BYTES = MetricSpec(
    "headroom_memory_min_bytes", "gauge", W,
    "memory.min where set (cgroup v2; MemoryQoS sets it to the memory request): memory "
    "the kernel never reclaims from the cgroup; absent when 0.",
)
MEMORY_LOW_BYTES = MetricSpec(
    "headroom_memory_low_bytes", "gauge", W,
    "memory.low where set (cgroup v2): memory reclaimed from the cgroup only when nothing "
    "else is left (best-effort protection); absent when 0.",
)
MEMORY_SWAP_BYTES = MetricSpec(
    "headroom_memory_swap_bytes", "gauge", W,
    "Swap used by the cgroup: memory.swap.current (v2) or total_swap of memory.stat (v1).",
)
TMPFS_USED_BYTES = MetricSpec(
    "headroom_tmpfs_used_bytes", "gauge", (*W, "mount"),
    "Bytes used on a tmpfs mount of the pod (/dev/shm, emptyDir medium Memory); they are "
    "shmem, charged to the pod's memory and never reclaimed without swap.",
)
TMPFS_ORPHANED_BYTES = MetricSpec(
    "headroom_tmpfs_orphaned_bytes", "gauge", (*W, "mount"),
    "Bytes of files on a tmpfs mount of the pod (/dev/shm, emptyDir medium Memory) that "
    "no live process of the pod has open or mapped: left by a killed process, charged to "
    "the pod until removed.",
)
TMPFS_SIZE_BYTES = MetricSpec(
    "headroom_tmpfs_size_bytes", "gauge", (*W, "mount"),
    "Size of a tmpfs mount of the pod (its sizeLimit, or the tmpfs default).",
)

NODE_MEMORY_TOTAL_BYTES = MetricSpec(
    "headroom_node_memory_total_bytes", "gauge", (),
    "Memory of the node (MemTotal of /proc/meminfo).",
)
NODE_MEMORY_AVAILABLE_BYTES = MetricSpec(
    "headroom_node_memory_available_bytes", "gauge", (),
    "Memory the node could still give without swapping (MemAvailable of /proc/meminfo).",
)
NODE_MEMORY_PRESSURE_SECONDS_TOTAL = MetricSpec(
    "headroom_node_memory_pressure_seconds_total", "counter", ("level",),
    "Time tasks of the node stalled waiting for memory (PSI total of /proc/pressure/memory): "
    "some (at least one task) or full (all non-idle tasks at once).",
)
NODE_MEMORY_PRESSURE_RATIO = MetricSpec(
    "headroom_node_memory_pressure_ratio", "gauge", ("level", "window"),
    "Share of wall time the node's tasks stalled waiting for memory over the kernel's "
    "window (PSI avg10, avg60 of /proc/pressure/memory, 0-1).",
)
NODE_MEMORY_PAGES_SCANNED_TOTAL = MetricSpec(
    "headroom_node_memory_pages_scanned_total", "counter", ("reclaimer",),
    "Pages the node's reclaim scanned since boot, by who reclaimed (pgscan_* of /proc/vmstat).",
)
NODE_MEMORY_PAGES_RECLAIMED_TOTAL = MetricSpec(
    "headroom_node_memory_pages_reclaimed_total", "counter", ("reclaimer",),
    "Pages the node's reclaim freed since boot, by who reclaimed (pgsteal_* of /proc/vmstat).",
)
NODE_OOM_KILLS_TOTAL = MetricSpec(
    "headroom_node_oom_kills_total", "counter", (),
    "Processes the kernel's OOM killer killed on the node since boot, in any cgroup "
    "(oom_kill of /proc/vmstat: each process signalled counts; headroom_oom_kills_total "
    "counts kills per pod).",
)

# --- processes ---------------------------------------------------------------------
PROCESS_MEMORY_BYTES = MetricSpec(
    "headroom_process_memory_bytes", "gauge", (*W, "process", "kind"),
    "Resident memory of the container's processes of that name, from /proc/PID/status "
    "(kind: rss_anon, rss_file, rss_shmem, swap), summed over processes.",
)
PROCESS_MEMORY_PSS_BYTES = MetricSpec(
    "headroom_process_memory_pss_bytes", "gauge", (*W, "process", "kind"),
    "Proportional set size of the container's processes of that name from "
    "/proc/PID/smaps_rollup (kind: anon, file, shmem); refreshed at a low frequency and "
    "skipped for processes above the size gate.",
)
# The brief named this headroom_process_count; promtool's lint rejects a _count suffix on
# a gauge (it reads as a histogram/summary part), so it is headroom_processes.
PROCESS_COUNT = MetricSpec(
    "headroom_processes", "gauge", (*W, "process"),
    "Processes of that name in the container.",
)

# --- GPU -----------------------------------------------------------------------------
GPU_MEMORY_TOTAL_BYTES = MetricSpec(
    "headroom_gpu_memory_total_bytes", "gauge", ("gpu", "uuid"),
    "Total memory of the GPU (or MIG instance), from NVML.",
)
GPU_MEMORY_USED_BYTES = MetricSpec(
    "headroom_gpu_memory_used_bytes", "gauge", ("gpu", "uuid"),
    "Used memory of the GPU (or MIG instance), from NVML.",
)
PROCESS_GPU_MEMORY_BYTES = MetricSpec(
    "headroom_process_gpu_memory_bytes", "gauge", (*W, "process", "gpu", "uuid"),
    "GPU memory used by the container's processes of that name, from NVML.",
)

# --- vLLM ----------------------------------------------------------------------------
V = (*W, "model_name", "engine")
VLLM_UP = MetricSpec(
    "headroom_vllm_up", "gauge", W,
    "1 when the pod's vLLM /metrics was read this scrape, else 0.",
)
VLLM_KV_CACHE_CAPACITY_BYTES = MetricSpec(
    "headroom_vllm_kv_cache_capacity_bytes", "gauge", (*V, "medium"),
    "KV-cache capacity in bytes (medium gpu from vllm:cache_config_info, cpu from "
    "vllm:kv_offload_config_info).",
)
VLLM_KV_CACHE_CAPACITY_BLOCKS = MetricSpec(
    "headroom_vllm_kv_cache_capacity_blocks", "gauge", (*V, "medium"),
    "KV-cache capacity in blocks.",
)
VLLM_KV_CACHE_USAGE_RATIO = MetricSpec(
    "headroom_vllm_kv_cache_usage_ratio", "gauge", (*V, "medium"),
    "Fraction of KV-cache blocks in use (0-1).",
)
VLLM_PREFIX_CACHE_BLOCKS = MetricSpec(
    "headroom_vllm_prefix_cache_blocks", "gauge", (*V, "medium"),
    "Live prefix-cache blocks, counted from vLLM's KV cache events; present only while "
    "the count is known exactly (see headroom_vllm_kv_events_synced).",
)
VLLM_KV_EVENTS_SYNCED = MetricSpec(
    "headroom_vllm_kv_events_synced", "gauge", (*V, "medium"),
    "1 while headroom follows that engine's KV cache events and its prefix-cache count "
    "is exact; 0 while disconnected, or after events were lost (until vLLM clears its "
    "cache or restarts).",
)
VLLM_KV_EVENTS_LOST_TOTAL = MetricSpec(
    "headroom_vllm_kv_events_lost_total", "counter", (*V, "reason"),
    "KV cache events lost by reason: gap (batches never applied), overflow (events "
    "dropped at a bound), garbage (messages that are not event batches), disconnect "
    "(connections to the publisher lost).",
)
VLLM_REQUESTS = MetricSpec(
    "headroom_vllm_requests", "gauge", (*V, "state"),
    "Requests by state (running, waiting, swapped).",
)
VLLM_PREEMPTIONS_TOTAL = MetricSpec(
    "headroom_vllm_preemptions_total", "counter", V,
    "Requests preempted by the vLLM scheduler.",
)

# --- post-mortem -----------------------------------------------------------------------
OOM_KILLS_TOTAL = MetricSpec(
    "headroom_oom_kills_total", "counter", (*W, "process"),
    "OOM kills seen by headroom's watcher since it started, once each (a memory.oom.group "
    "kill of several processes is one), with the victim's process name when known.",
)

# --- exporter health --------------------------------------------------------------------
COLLECTOR_SUCCESS = MetricSpec(
    "headroom_collector_success", "gauge", ("collector",),
    "1 when the collector succeeded on this scrape, else 0.",
)
COLLECTOR_DEGRADED = MetricSpec(
    "headroom_collector_degraded", "gauge", ("collector", "reason"),
    "1 once the collector lost data to a missing capability (reason missing_cap_sys_ptrace, "
    "missing_cap_syslog) or a denied device or file (device_denied, permission_denied): the "
    "series it would export are missing, though it may still succeed.",
)
COLLECTOR_DURATION_SECONDS = MetricSpec(
    "headroom_collector_duration_seconds", "gauge", ("collector",),
    "Wall time the collector took on this scrape.",
)
BUILD_INFO = MetricSpec(
    "headroom_build_info", "gauge", ("version",),
    "Always 1; the version of the headroom exporter.",
)

# --- the exporter's own process (client_python's standard names, so existing dashboards
# and the exporter-health dashboard read them without a headroom prefix) ----------------
SELF_RESIDENT_MEMORY_BYTES = MetricSpec(
    "process_resident_memory_bytes", "gauge", (), "Resident memory size in bytes.")
SELF_CPU_SECONDS_TOTAL = MetricSpec(
    "process_cpu_seconds_total", "counter", (), "Total user and system CPU time in seconds.")
SELF_OPEN_FDS = MetricSpec("process_open_fds", "gauge", (), "Number of open file descriptors.")
SELF_START_TIME_SECONDS = MetricSpec(
    "process_start_time_seconds", "gauge", (),
    "Start time of the process since unix epoch in seconds.")

ALL: tuple[MetricSpec, ...] = tuple(
    v for v in globals().values() if isinstance(v, MetricSpec)
)

# --- label values --------------------------------------------------------------------
# The values a label takes, so the renderer, the rules and the dashboards spell them alike.

# headroom_memory_bytes{kind}, in stacking order (least reclaimable first: the order
# dashboards stack them).
KIND_ANON, KIND_SHMEM, KIND_KERNEL, KIND_SOCK = "anon", "shmem", "kernel", "sock"
MEMORY_KINDS: tuple[str, ...] = (
    KIND_ANON, KIND_SHMEM, KIND_KERNEL, KIND_SOCK, "unaccounted", "file_active", "file_inactive",
)
KIND_UNACCOUNTED = "unaccounted"
KIND_FILE_ACTIVE, KIND_FILE_INACTIVE = "file_active", "file_inactive"
# headroom_process_memory_bytes{kind}
RSS_ANON, RSS_FILE, RSS_SHMEM, SWAP = "rss_anon", "rss_file", "rss_shmem", "swap"
PROCESS_MEMORY_KINDS: tuple[str, ...] = (RSS_ANON, RSS_FILE, RSS_SHMEM, SWAP)
# headroom_process_memory_pss_bytes{kind}
PSS_ANON, PSS_FILE, PSS_SHMEM = "anon", "file", "shmem"
PSS_KINDS: tuple[str, ...] = (PSS_ANON, PSS_FILE, PSS_SHMEM)
# headroom_memory_events_total{event}, as the kernel names them (v1 has max and oom_kill)
EVENT_MAX, EVENT_OOM_KILL = "max", "oom_kill"
MEMORY_EVENTS: tuple[str, ...] = ("low", "high", EVENT_MAX, "oom", EVENT_OOM_KILL,
                                  "oom_group_kill")
# headroom_memory_pressure_seconds_total{level} (PSI)
PRESSURE_LEVELS: tuple[str, ...] = ("some", "full")
# headroom_node_memory_pressure_ratio{window}: PSI's averaging windows kept
PRESSURE_WINDOWS: tuple[str, ...] = ("10s", "60s")
# headroom_node_memory_pages_*_total{reclaimer}: who reclaimed (vmstat's pgscan_<reclaimer>)
RECLAIMERS: tuple[str, ...] = ("kswapd", "direct", "khugepaged", "proactive")
# headroom_vllm_*{medium}: where KV-cache blocks live
MEDIUM_GPU = "gpu"
MEDIUM_CPU = "cpu"
KV_MEDIA: tuple[str, ...] = (MEDIUM_GPU, MEDIUM_CPU)
# headroom_vllm_kv_events_lost_total{reason}
KV_EVENTS_LOST_REASONS: tuple[str, ...] = ("gap", "overflow", "garbage", "disconnect")
# headroom_vllm_requests{state} (swapped: V0 only)
REQUEST_STATES: tuple[str, ...] = ("running", "waiting", "swapped")
# headroom_processes{process}: the name the tail beyond --procfs.max-processes is summed as
OTHER_PROCESS = "other"


def by_name() -> dict[str, MetricSpec]:
    return {m.name: m for m in ALL}
