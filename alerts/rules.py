"""The rule groups, assembled in one place from the modules per area, as plain dicts.

One module per job, like the mixins: ``forecast`` (the fast recording group),
``lasting`` (the lasting recording group), ``memory`` (the cgroup's memory alerts),
``tmpfs`` (shared memory), ``node`` (node pressure), ``oom`` (kills), ``vllm`` (the vLLM
alerts), ``meta`` (the exporter's own health); ``build`` holds what they share. Metric
names and label values come from ``exporter.catalog``; recording-rule names, the config
and the PromQL helpers from ``exporter.promql``; ``alerts.generate`` renders the groups
to YAML.

How memory is read (each figure per workload: namespace, pod, container; the pod-level
cgroup has container=""):

* unreclaimable = usage - active_file - inactive_file - slab_reclaimable (the exporter's
  headroom_memory_unreclaimable_bytes): anon, shmem (/dev/shm, emptyDir medium Memory,
  CUDA pinned host memory), unevictable and unreclaimable kernel memory. The kernel can
  only take page cache back, so this, not the working set, is what reaches the limit
  before an OOM kill.
* headroom = limit - unreclaimable: what can still be charged once all page cache has
  been reclaimed.
* hidden = unreclaimable - what the processes account for (PSS where the exporter has
  it, RSS otherwise): shmem no process maps, kernel memory and leftovers.

What real clusters do to these series, and how the rules hold:

* Scrape gaps and exporter restarts: Prometheus marks every series stale when a scrape
  fails, so an instant vector goes empty. Recorded figures read ``last_over_time`` over
  ``hold`` and alerts ``keep_firing_for``: a gap neither resolves a page nor re-fires it.
* An exporter pod replaced (new ``instance``): every figure is aggregated by workload
  before any slope is taken, and a slope needs a series that spans enough of its window.
* A fast ramp: the sustained slope (the slowest short slope over a few minutes) pages a
  climb that has lasted; a batch that rose for a few minutes and stopped drops out.
* A restart (unreclaimable falls below half its floor) starts a new baseline.
* One page per problem: a container whose own limit binds owns its pod's alerts; the
  pod-level cgroup owns them only when its limit binds first (``build.binding``).
"""

from __future__ import annotations

from exporter.promql import Config, duration

from . import memory, meta, node, oom, tmpfs, vllm
from .build import Group, binding, hysteresis
from .forecast import fast_recording_rules, pattern_windows_s
from .lasting import floor_memory_recording_rules, lasting_recording_rules


def groups(config: Config) -> list[Group]:
    p = config.rule_group_prefix
    return [
        {"name": f"{p}.rules", "rules": fast_recording_rules(config)},
        {"name": f"{p}.lasting", "interval": duration(config.lasting_interval_s),
         "rules": lasting_recording_rules(config)},
        {"name": f"{p}.floor_memory", "interval": duration(config.floor_memory_interval_s),
         "rules": floor_memory_recording_rules(config)},
        {
            "name": f"{p}-memory",
            "rules": [
                memory.filling_up_warning(config),
                memory.filling_up_critical(config),
                memory.near_limit(config),
                memory.reclaim_at_limit(config),
                memory.hidden_memory_growth(config),
                tmpfs.shared_memory_filling_up(config),
                tmpfs.stale_shared_memory(config),
                vllm.kv_offload_will_not_fit(config),
                node.node_memory_pressure(config),
                oom.pod_oom_killed(config),
            ],
        },
        {
            "name": f"{p}-exporter",
            "rules": [meta.exporter_down(config), meta.collector_failing(config),
                      vllm.vllm_scrape_failing(config)],
        },
    ]


__all__ = ["binding", "fast_recording_rules", "floor_memory_recording_rules", "groups",
           "hysteresis",
           "lasting_recording_rules", "pattern_windows_s"]
