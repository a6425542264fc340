"""Recording and alerting rule groups, as plain dicts, built from a Config.

Every metric name comes from ``exporter.catalog``; recording rule names are constants
here so the dashboards can import them. ``alerts.generate`` renders the groups to YAML.

How memory is read (each figure per workload: namespace, pod, container; the pod-level
cgroup has container=""):

* unreclaimable = usage - active_file - inactive_file - slab_reclaimable (the exporter's
  headroom_memory_unreclaimable_bytes): anon, shmem (/dev/shm, emptyDir medium Memory,
  CUDA pinned host memory), unevictable and unreclaimable kernel memory. The kernel can
  only take page cache back, so this, not the working set, is what reaches the limit
  before an OOM kill. Working set = usage - inactive_file still counts active page cache,
  which the kernel squeezes out as unreclaimable memory grows: it stays flat.
* headroom = limit - unreclaimable: what can still be charged once all page cache has
  been reclaimed.
* hidden = unreclaimable - what the processes account for, where a process accounts for
  its private anon memory and the shmem it maps (PSS where the exporter has it, since PSS
  splits pages shared by several processes; RSS otherwise). What is left is shmem that no
  process maps (files left in /dev/shm, e.g. by a killed container), kernel memory and
  leftovers. At the pod level (container="") every container's processes are subtracted
  from the pod cgroup, so charges reparented to the pod after a restart show up there.
"""

from __future__ import annotations

from typing import Any

from exporter import catalog as c

from .config import Config, promql_duration

Rule = dict[str, Any]
Group = dict[str, Any]

# --- recording rule names (stable: dashboards import them) -------------------------------
LIMIT = "headroom:memory_limit:bytes"
UNRECLAIMABLE = "headroom:memory_unreclaimable:bytes"
WORKING_SET = "headroom:memory_working_set:bytes"
UNRECLAIMABLE_RATIO = "headroom:memory_unreclaimable:ratio"
HEADROOM = "headroom:memory_headroom:bytes"
UNRECLAIMABLE_DERIV = "headroom:memory_unreclaimable:deriv1h"
UNRECLAIMABLE_BASELINE = "headroom:memory_unreclaimable:baseline1d"
UNRECLAIMABLE_BASELINE_RISE = "headroom:memory_unreclaimable:baseline_rise1d"
UNRECLAIMABLE_GROWTH_RATE = "headroom:memory_unreclaimable:growth_rate"
TIME_TO_LIMIT = "headroom:memory_time_to_limit:seconds"
WORKING_SET_BASELINE = "headroom:memory_working_set:baseline1d"
PROCESS_ATTRIBUTED = "headroom:process_memory_attributed:bytes"
HIDDEN = "headroom:memory_hidden:bytes"
HIDDEN_BASELINE_RISE = "headroom:memory_hidden:baseline_rise1d"
KV_OFFLOAD_PENDING = "headroom:vllm_kv_offload_pending:bytes"

# Name -> meaning, in evaluation order (later rules read earlier ones).
RECORDING_RULE_HELP: dict[str, str] = {
    LIMIT: "effective hard limit of the cgroup",
    UNRECLAIMABLE: "memory the kernel cannot reclaim without swap (anon, shmem, kernel)",
    WORKING_SET: "usage - inactive_file: the kubelet's working set, for comparison",
    UNRECLAIMABLE_RATIO: "unreclaimable / limit",
    HEADROOM: "limit - unreclaimable: what can still be charged once page cache is gone",
    UNRECLAIMABLE_DERIV: "slope of unreclaimable over the short window (bytes/s)",
    UNRECLAIMABLE_BASELINE: "lowest unreclaimable figure in the baseline window (1d)",
    UNRECLAIMABLE_BASELINE_RISE: "baseline now minus baseline one window earlier: growth "
    "that diurnal load cannot explain (bytes per window)",
    UNRECLAIMABLE_GROWTH_RATE: "fastest short-window slope in the last baseline window, "
    "present only while the baseline rises by more than the minimum (bytes/s)",
    TIME_TO_LIMIT: "headroom / current slope, where the slope is positive (seconds)",
    WORKING_SET_BASELINE: "lowest working set in the baseline window: flat while "
    "unreclaimable memory squeezes page cache out",
    PROCESS_ATTRIBUTED: "anon + mapped shmem the container's processes account for "
    "(PSS where present, else RSS)",
    HIDDEN: "unreclaimable memory no process accounts for (unmapped /dev/shm files, "
    "kernel memory, charges left by dead containers)",
    HIDDEN_BASELINE_RISE: "growth of the hidden memory's baseline over one window",
    KV_OFFLOAD_PENDING: "part of vLLM's CPU KV-offload tier not yet in use: "
    "capacity * (1 - usage)",
}
RECORDING_RULES: tuple[str, ...] = tuple(RECORDING_RULE_HELP)

ALERT_NAMES: tuple[str, ...] = (
    "HeadroomMemoryFillingUp",
    "HeadroomMemoryNearLimit",
    "HeadroomMemoryReclaimAtLimit",
    "HeadroomHiddenMemoryGrowth",
    "HeadroomSharedMemoryFillingUp",
    "HeadroomKVOffloadWillNotFit",
    "HeadroomPodOOMKilled",
    "HeadroomExporterDown",
    "HeadroomCollectorFailing",
    "HeadroomVLLMScrapeFailing",
)


# --- small PromQL helpers ------------------------------------------------------------------
def _sel(config: Config, **matchers: str) -> str:
    """The config selector plus exact matchers, as a {...} block."""
    parts = [config.selector] if config.selector else []
    parts += [f'{k}="{v}"' for k, v in matchers.items()]
    return "{" + ", ".join(parts) + "}"


def _by(labels: tuple[str, ...], *extra: str) -> str:
    return "(" + ", ".join((*labels, *extra)) + ")"


def _pod_labels(config: Config) -> tuple[str, ...]:
    """The group labels without container: what identifies a pod."""
    return tuple(x for x in config.group_labels if x != "container")


def _num(x: float) -> str:
    """A number PromQL reads, without float noise: 67108864, 0.95, 43200."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _d(seconds: int) -> str:
    return promql_duration(seconds)


def _workload_query(config: Config, metric: str, fmt: str, times: str = "") -> str:
    """Go template that prints ``metric`` (times ``times``) for the alert's workload,
    formatted by ``fmt`` (e.g. humanize1024); prints nothing when the series is absent."""
    matchers = ",".join(f"{x}=%q" for x in config.group_labels)
    args = " ".join(f"$labels.{x}" for x in config.group_labels)
    scale = f" * {times}" if times else ""
    return (
        f'{{{{ range printf "{metric}{{{matchers}}}{scale}" {args} | query }}}}'
        f"{{{{ .Value | {fmt} }}}}{{{{ end }}}}"
    )


_WHERE = (
    "{{ if $labels.container }}container {{ $labels.container }} of pod "
    "{{ $labels.namespace }}/{{ $labels.pod }}{{ else }}pod {{ $labels.namespace }}/"
    "{{ $labels.pod }} (pod-level cgroup){{ end }}"
)


# --- recording rules ---------------------------------------------------------------------
def recording_rules(config: Config) -> list[Rule]:
    g = _by(config.group_labels)
    pod = _by(_pod_labels(config))
    dw = _d(config.deriv_window_s)
    bw = _d(config.baseline_window_s)
    unrecl = c.MEMORY_UNRECLAIMABLE_BYTES.name + _sel(config)

    def attributed(pss_kind: str, rss_kind: str) -> str:
        # Per process: PSS where the exporter read it (it splits shared pages), else RSS.
        by_p = _by(config.group_labels, "process")
        return (
            f"sum by {g} (\n"
            f"    max by {by_p} ({c.PROCESS_MEMORY_PSS_BYTES.name}"
            f"{_sel(config, kind=pss_kind)})\n"
            f"  or\n"
            f"    max by {by_p} ({c.PROCESS_MEMORY_BYTES.name}{_sel(config, kind=rss_kind)})\n"
            f")"
        )

    rise_min = _num(config.min_baseline_rise_bytes)
    rise_ratio = _num(config.min_baseline_rise_ratio)
    kv_by = _by(config.group_labels, "model_name", "engine")
    exprs: dict[str, str] = {
        # max by: one series per workload even while two exporter pods overlap.
        LIMIT: f"max by {g} ({c.MEMORY_LIMIT_BYTES.name}{_sel(config)})",
        UNRECLAIMABLE: f"max by {g} ({unrecl})",
        WORKING_SET: f"max by {g} ({c.MEMORY_WORKING_SET_BYTES.name}{_sel(config)})",
        UNRECLAIMABLE_RATIO: f"{UNRECLAIMABLE} / {LIMIT}",
        HEADROOM: f"clamp_min({LIMIT} - {UNRECLAIMABLE}, 0)",
        UNRECLAIMABLE_DERIV: f"max by {g} (deriv({unrecl}[{dw}]))",
        # From the raw series, so the baseline exists as soon as the rules are loaded.
        UNRECLAIMABLE_BASELINE: f"min by {g} (min_over_time({unrecl}[{bw}]))",
        UNRECLAIMABLE_BASELINE_RISE: (
            f"{UNRECLAIMABLE_BASELINE}\n"
            f"  - min by {g} (min_over_time({unrecl}[{bw}] offset {bw}))"
        ),
        # The rate at which it grows while it grows (a nightly burst, a steady leak), kept
        # only while the baseline rises: diurnal ramps return to the same floor.
        UNRECLAIMABLE_GROWTH_RATE: (
            f"max_over_time({UNRECLAIMABLE_DERIV}[{bw}]) > 0\n"
            f"and {UNRECLAIMABLE_BASELINE_RISE} > {rise_min}\n"
            f"and {UNRECLAIMABLE_BASELINE_RISE} > {rise_ratio} * {LIMIT}"
        ),
        TIME_TO_LIMIT: f"{HEADROOM} / ({UNRECLAIMABLE_DERIV} > 0)",
        WORKING_SET_BASELINE: (
            f"min by {g} (min_over_time("
            f"{c.MEMORY_WORKING_SET_BYTES.name}{_sel(config)}[{bw}]))"
        ),
        PROCESS_ATTRIBUTED: (
            f"{attributed('anon', 'rss_anon')}\n+\n{attributed('shmem', 'rss_shmem')}"
        ),
        # Container level: its own processes. Pod level: every container's processes,
        # joined on the pod labels (the pod cgroup has container="").
        HIDDEN: (
            f'clamp_min({UNRECLAIMABLE}{{container!=""}} - {PROCESS_ATTRIBUTED}, 0)\n'
            f"or\n"
            f'clamp_min(\n  {UNRECLAIMABLE}{{container=""}}\n'
            f"  - on {pod} group_left ()\n"
            f"  sum by {pod} ({PROCESS_ATTRIBUTED}),\n  0\n)"
        ),
        HIDDEN_BASELINE_RISE: (
            f"min_over_time({HIDDEN}[{bw}])\n  - min_over_time({HIDDEN}[{bw}] offset {bw})"
        ),
        KV_OFFLOAD_PENDING: (
            f"sum by {g} (\n"
            f"    max by {kv_by} ({c.VLLM_KV_CACHE_CAPACITY_BYTES.name}"
            f"{_sel(config, medium='cpu')})\n"
            f"  * on {kv_by}\n"
            f"    clamp(1 - max by {kv_by} ({c.VLLM_KV_CACHE_USAGE_RATIO.name}"
            f"{_sel(config, medium='cpu')}), 0, 1)\n"
            f")"
        ),
    }
    assert tuple(exprs) == RECORDING_RULES
    return [{"record": name, "expr": expr} for name, expr in exprs.items()]


# --- alerting rules ----------------------------------------------------------------------
def _alert(
    config: Config,
    name: str,
    expr: str,
    severity: str,
    for_s: int,
    summary: str,
    description: str,
) -> Rule:
    rule: Rule = {"alert": name, "expr": expr}
    if for_s:
        rule["for"] = _d(for_s)
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": config.runbook_url(name),
    }
    return rule


def _rise_cap(config: Config, horizon_s: int) -> str:
    """Growth expected within the horizon is capped by the baseline's rise per window
    (scaled when the horizon is longer than the window): a nightly burst or one-off spike
    does not extrapolate beyond what the baseline really gained."""
    factor = max(1.0, horizon_s / config.baseline_window_s)
    return UNRECLAIMABLE_BASELINE_RISE + ("" if factor == 1 else f" * {_num(factor)}")


def filling_up_warning(config: Config) -> Rule:
    h = config.fill_warning_horizon_s
    hd = _d(h)
    expr = (
        f"{HEADROOM} < {UNRECLAIMABLE_GROWTH_RATE} * {h}\n"
        f"and\n"
        f"{HEADROOM} < {_rise_cap(config, h)}"
    )
    return _alert(
        config, "HeadroomMemoryFillingUp", expr, "warning", config.fill_warning_for_s,
        f"Unreclaimable memory of {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} is "
        f"predicted to reach its limit within {hd}.",
        f"Memory the kernel cannot reclaim in {_WHERE} keeps growing: its "
        f"{_d(config.baseline_window_s)} baseline rose by "
        f"{_workload_query(config, UNRECLAIMABLE_BASELINE_RISE, 'humanize1024')}B and it "
        f"grows by up to "
        f"{_workload_query(config, UNRECLAIMABLE_GROWTH_RATE, 'humanize1024', '3600')}"
        f"B/h. Only {{{{ $value | humanize1024 }}}}B are left below the "
        f"{_workload_query(config, LIMIT, 'humanize1024')}B limit "
        f"({_workload_query(config, UNRECLAIMABLE_RATIO, 'humanizePercentage')} used): "
        f"the pod will be OOM-killed within about {hd} unless the growth stops. "
        f"The working set may look flat: page cache is being squeezed out.",
    )


def filling_up_critical(config: Config) -> Rule:
    h = config.fill_critical_horizon_s
    hd = _d(h)
    expr = (
        f"(\n"
        f"    {HEADROOM} < {UNRECLAIMABLE_DERIV} * {h}\n"
        f"  or\n"
        f"    (\n"
        f"        {HEADROOM} < {UNRECLAIMABLE_GROWTH_RATE} * {h}\n"
        f"      and\n"
        f"        {HEADROOM} < {_rise_cap(config, h)}\n"
        f"    )\n"
        f")\n"
        f"and {UNRECLAIMABLE_DERIV} > 0\n"
        f"and {UNRECLAIMABLE_RATIO} > {_num(config.fill_critical_min_ratio)}"
    )
    return _alert(
        config, "HeadroomMemoryFillingUp", expr, "critical", config.fill_critical_for_s,
        f"{{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} will be OOM-killed within "
        f"{hd}.",
        f"Unreclaimable memory of {_WHERE} is growing now "
        f"({_workload_query(config, UNRECLAIMABLE_DERIV, 'humanize1024', '3600')}B/h "
        f"over the last {_d(config.deriv_window_s)}) and only "
        f"{{{{ $value | humanize1024 }}}}B are left below the "
        f"{_workload_query(config, LIMIT, 'humanize1024')}B limit "
        f"({_workload_query(config, UNRECLAIMABLE_RATIO, 'humanizePercentage')} used). "
        f"At this rate the kernel OOM-kills it within {hd}.",
    )


def near_limit(config: Config) -> Rule:
    return _alert(
        config, "HeadroomMemoryNearLimit",
        f"{UNRECLAIMABLE_RATIO} > {_num(config.near_limit_ratio)}",
        "critical", config.near_limit_for_s,
        "{{ $labels.namespace }}/{{ $labels.pod }} has almost no reclaimable memory left.",
        f"Memory the kernel cannot reclaim is at {{{{ $value | humanizePercentage }}}} of "
        f"the {_workload_query(config, LIMIT, 'humanize1024')}B limit of {_WHERE}; the "
        f"next allocation that does not fit triggers the OOM killer.",
    )


def reclaim_at_limit(config: Config) -> Rule:
    g = _by(config.group_labels)
    expr = (
        f"{UNRECLAIMABLE_RATIO} > {_num(config.reclaim_min_ratio)}\n"
        f"and\n"
        f"sum by {g} (rate({c.MEMORY_EVENTS_TOTAL.name}{_sel(config, event='max')}"
        f"[{_d(config.reclaim_window_s)}])) > 0"
    )
    return _alert(
        config, "HeadroomMemoryReclaimAtLimit", expr, "warning", config.reclaim_for_s,
        "The kernel keeps reclaiming memory at the limit of "
        "{{ $labels.namespace }}/{{ $labels.pod }}.",
        f"{_WHERE} keeps hitting its memory limit (memory.events max / memory.failcnt "
        f"rising) while {{{{ $value | humanizePercentage }}}} of the limit cannot be "
        f"reclaimed: the kernel is squeezing the last page cache out, and an OOM kill "
        f"follows if it grows further.",
    )


def hidden_memory_growth(config: Config) -> Rule:
    rise = HIDDEN_BASELINE_RISE + '{container=""}'
    expr = (
        f"{rise} > {_num(config.hidden_min_rise_bytes)}\n"
        f"and\n"
        f"{rise} > {_num(config.hidden_min_rise_ratio)} * {LIMIT}"
    )
    return _alert(
        config, "HeadroomHiddenMemoryGrowth", expr, "warning", config.hidden_for_s,
        "Memory no process accounts for grows in {{ $labels.namespace }}/"
        "{{ $labels.pod }}.",
        f"The baseline of memory that no process of pod {{{{ $labels.namespace }}}}/"
        f"{{{{ $labels.pod }}}} maps rose by {{{{ $value | humanize1024 }}}}B over "
        f"{_d(config.baseline_window_s)} (now "
        f"{_workload_query(config, HIDDEN, 'humanize1024')}B). It is shmem no process "
        f"maps (files in /dev/shm or a memory-backed emptyDir), kernel memory, or "
        f"charges left by a killed container: no process RSS shows it.",
    )


def shared_memory_filling_up(config: Config) -> Rule:
    by = _by(config.group_labels, "mount")
    used = f"max by {by} ({c.TMPFS_USED_BYTES.name}{_sel(config)})"
    size = f"max by {by} ({c.TMPFS_SIZE_BYTES.name}{_sel(config)})"
    predicted = (
        f"max by {by} (predict_linear({c.TMPFS_USED_BYTES.name}{_sel(config)}"
        f"[{_d(config.shm_fill_window_s)}], {config.shm_fill_horizon_s}))"
    )
    expr = (
        f"{used} / {size} > {_num(round(1 - config.shm_fill_max_free_ratio, 6))}\n"
        f"and\n"
        f"{predicted} > {size}"
    )
    return _alert(
        config, "HeadroomSharedMemoryFillingUp", expr, "warning", config.shm_fill_for_s,
        "tmpfs {{ $labels.mount }} of {{ $labels.namespace }}/{{ $labels.pod }} is "
        f"predicted to fill within {_d(config.shm_fill_horizon_s)}.",
        "{{ $labels.mount }} of pod {{ $labels.namespace }}/{{ $labels.pod }} is "
        "{{ $value | humanizePercentage }} full and has grown steadily over the last "
        f"{_d(config.shm_fill_window_s)}. Its pages are shmem, charged to the pod's "
        "memory and never reclaimed: writers get ENOSPC when it fills, and the pod is "
        "OOM-killed first if its memory limit is smaller than the mount.",
    )


def kv_offload_will_not_fit(config: Config) -> Rule:
    pod = _by(_pod_labels(config))
    # vLLM series carry the vLLM container's labels: compare with that container's own
    # headroom and, joined on the pod labels, with the pod-level cgroup's (container="").
    expr = (
        f"{KV_OFFLOAD_PENDING} - {HEADROOM} > 0\n"
        f"or\n"
        f"{KV_OFFLOAD_PENDING} - on {pod} group_left () {HEADROOM}{{container=\"\"}} > 0"
    )
    return _alert(
        config, "HeadroomKVOffloadWillNotFit", expr, "warning", config.kv_offload_for_s,
        "vLLM's CPU KV-offload tier in {{ $labels.namespace }}/{{ $labels.pod }} does "
        "not fit in the memory left.",
        f"The part of the CPU KV-offload tier of {_WHERE} not yet in use "
        f"({_workload_query(config, KV_OFFLOAD_PENDING, 'humanize1024')}B) is larger "
        f"than the memory left below the limit, by {{{{ $value | humanize1024 }}}}B. "
        f"The pod will be OOM-killed when the tier fills, however slowly that happens.",
    )


def pod_oom_killed(config: Config) -> Rule:
    pod = _pod_labels(config)
    by_p = _by(pod, "process")
    series = c.OOM_KILLS_TOTAL.name + _sel(config)
    w = _d(config.oom_window_s)
    events = c.MEMORY_EVENTS_TOTAL.name + _sel(config, event="oom_kill")
    # The watcher's counter may first appear already at 1: increase() cannot see that, so
    # a series that did not exist one window ago counts too.
    expr = (
        f"sum by {by_p} (increase({series}[{w}])) > 0\n"
        f"or\n"
        f"sum by {by_p} (\n"
        f"    max by {_by(config.group_labels, 'process')} ({series})\n"
        f"  unless\n"
        f"    max by {_by(config.group_labels, 'process')} ({series} offset {w})\n"
        f") > 0\n"
        f"or on {_by(pod)}\n"
        f"sum by {_by(pod)} (increase({events}[{w}])) > 0"
    )
    return _alert(
        config, "HeadroomPodOOMKilled", expr, "warning", 0,
        "A process of {{ $labels.namespace }}/{{ $labels.pod }} was OOM-killed.",
        "The kernel OOM-killed {{ with $labels.process }}{{ . }}{{ else }}a process"
        "{{ end }} in pod {{ $labels.namespace }}/{{ $labels.pod }} "
        f"({{{{ $value | humanize }}}} kill(s) in the last {w}). Open headroom's OOM "
        "post-mortem for what grew before it.",
    )


def exporter_down(config: Config) -> Rule:
    up = "up" + _sel(config)
    return _alert(
        config, "HeadroomExporterDown", f"{up} == 0\nor\nabsent({up})", "warning",
        config.exporter_down_for_s,
        "headroom exporter {{ with $labels.instance }}{{ . }} {{ end }}is down.",
        "Prometheus cannot scrape the headroom exporter"
        "{{ with $labels.instance }} at {{ . }}{{ end }}: none of headroom's memory "
        "alerts can fire for the pods on that node.",
    )


def collector_failing(config: Config) -> Rule:
    expr = (
        f"avg_over_time({c.COLLECTOR_SUCCESS.name}{_sel(config)}"
        f"[{_d(config.collector_window_s)}]) < 0.5"
    )
    return _alert(
        config, "HeadroomCollectorFailing", expr, "warning", config.collector_for_s,
        "headroom collector {{ $labels.collector }} on {{ $labels.instance }} is failing.",
        "The {{ $labels.collector }} collector of the headroom exporter on "
        "{{ $labels.instance }} succeeded on only {{ $value | humanizePercentage }} of "
        f"scrapes over {_d(config.collector_window_s)}: the series it feeds are missing "
        "or stale. See the exporter's log.",
    )


def vllm_scrape_failing(config: Config) -> Rule:
    g = _by(config.group_labels)
    expr = (
        f"max by {g} (avg_over_time({c.VLLM_UP.name}{_sel(config)}"
        f"[{_d(config.vllm_scrape_window_s)}])) < 0.5"
    )
    return _alert(
        config, "HeadroomVLLMScrapeFailing", expr, "warning", config.vllm_scrape_for_s,
        "headroom cannot read vLLM's /metrics in {{ $labels.namespace }}/"
        "{{ $labels.pod }}.",
        f"headroom read the /metrics of the vLLM in {_WHERE} on only "
        f"{{{{ $value | humanizePercentage }}}} of scrapes over "
        f"{_d(config.vllm_scrape_window_s)}: the KV-cache series and "
        f"HeadroomKVOffloadWillNotFit are blind for it.",
    )


def groups(config: Config) -> list[Group]:
    p = config.rule_group_prefix
    return [
        {"name": f"{p}.rules", "rules": recording_rules(config)},
        {
            "name": f"{p}-memory",
            "rules": [
                filling_up_warning(config),
                filling_up_critical(config),
                near_limit(config),
                reclaim_at_limit(config),
                hidden_memory_growth(config),
                shared_memory_filling_up(config),
                kv_offload_will_not_fit(config),
                pod_oom_killed(config),
            ],
        },
        {
            "name": f"{p}-exporter",
            "rules": [exporter_down(config), collector_failing(config),
                      vllm_scrape_failing(config)],
        },
    ]


__all__ = [
    "ALERT_NAMES", "RECORDING_RULES", "RECORDING_RULE_HELP", "groups",
]
