"""Recording and alerting rule groups, as plain dicts, built from a ``promql.Config``.

Metric names come from ``exporter.catalog``, recording-rule names, the config and the
PromQL helpers from ``exporter.promql``; ``alerts.generate`` renders the groups to YAML.

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

What real clusters do to these series, and how the rules hold (issue 13):

* Scrape gaps and exporter restarts: Prometheus marks every series stale when a scrape
  fails, so an instant vector goes empty. Recorded figures read ``last_over_time`` over
  ``hold`` and alerts ``keep_firing_for``: a gap neither resolves a page nor re-fires it.
* An exporter pod replaced (new ``instance``): every figure is aggregated by workload
  before any slope is taken, and a slope needs a series that spans enough of its window.
* A fast ramp: the sustained slope (the slowest short slope over a few minutes) pages a
  climb that has lasted; a batch that rose for a few minutes and stopped drops out.
* A restart (unreclaimable falls below half its floor) starts a new baseline.
* One page per problem: a container whose own limit binds owns its pod's alerts; the
  pod-level cgroup owns them only when its limit binds first (``owned``).
"""

from __future__ import annotations

from typing import Any

from exporter import catalog as c
from exporter import promql as q
from exporter.promql import Config, by, duration, expr, number, series

Rule = dict[str, Any]
Group = dict[str, Any]


# --- small helpers ---------------------------------------------------------------------------
def _raw(config: Config, metric: c.MetricSpec | str, **equal: str) -> str:
    """A raw exporter series, selected by the config's selector."""
    return series(metric, config.selector, **equal)


def _held(config: Config, metric: c.MetricSpec | str, labels: tuple[str, ...], **equal: str
          ) -> str:
    """One series per ``labels``, holding its last sample through a scrape gap; the
    largest where two exporter instances overlap (a rollout)."""
    return expr(
        "max by ${by} (last_over_time(${raw}[${hold}]))",
        by=by(*labels), raw=_raw(config, metric, **equal), hold=duration(config.hold_s),
    )


def _spans(name: str, window_s: int, ratio: float) -> str:
    """Present when ``name`` has a sample at least ``ratio * window`` old: enough of
    the window for a slope to mean something (a new series' first samples do not)."""
    old = max(1, round(window_s * ratio))
    rest = max(1, window_s - old)
    return f"present_over_time({name}[{duration(rest)}] offset {duration(old)})"


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


def owned(config: Config, condition: str) -> str:
    """``condition`` (per workload) kept only for the cgroup that owns the problem: a
    container whose limit binds (``OWNER``), or the pod-level cgroup unless such a
    container of its pod meets the condition too or has the pod's limit itself (a
    single-container pod: the pod-level cgroup is its twin). One problem, one alert."""
    return expr(
        """
        (
          ${cond}
        )
        and on ${g} (
            ${owner}
          or
            ${headroom}{container=""}
          unless on ${pod} (
            (
              ${cond}
            )
            and on ${g} ${owner}
          )
          unless on ${pod} (
            ${owner}
            and on ${g}
            ${limit}{container!=""} + ${tol} >= on ${pod} group_left () ${limit}{container=""}
          )
        )
        """,
        cond=_indent(condition, 2), g=by(*config.group_labels),
        pod=by(*config.pod_labels), owner=q.OWNER, headroom=q.HEADROOM, limit=q.LIMIT,
        tol=config.owner_tolerance_bytes,
    )


def _indent(text: str, n: int) -> str:
    return text.replace("\n", "\n" + " " * n)


# --- recording rules ---------------------------------------------------------------------
def recording_rules(config: Config) -> list[Rule]:
    g = config.group_labels
    gb = by(*g)
    bw = duration(config.baseline_window_s)
    hold = duration(config.hold_s)
    unrecl = _raw(config, c.MEMORY_UNRECLAIMABLE_BYTES)
    kv = (*g, "model_name", "engine")

    def attributed(pss_kind: str, rss_kind: str) -> str:
        # Per process: PSS where the exporter read it (it splits shared pages), else RSS.
        return expr(
            """
            sum by ${g} (
                ${pss}
              or
                ${rss}
            )
            """,
            g=gb,
            pss=_held(config, c.PROCESS_MEMORY_PSS_BYTES, (*g, "process"), kind=pss_kind),
            rss=_held(config, c.PROCESS_MEMORY_BYTES, (*g, "process"), kind=rss_kind),
        )

    def sustained(window_s: int, sustain_s: int) -> str:
        # The slowest slope over the sustain window, once the series spans it.
        return expr(
            """
            min_over_time(deriv(${u}[${w}])[${s}:])
              and
            ${spans}
            """,
            u=q.UNRECLAIMABLE, w=duration(window_s), s=duration(sustain_s),
            spans=_spans(q.UNRECLAIMABLE, window_s + sustain_s, 0.9),
        )

    restart_drop = expr(
        "${u} < ${ratio} * min_over_time(${u}[${bw}] offset ${hold})",
        u=q.UNRECLAIMABLE, ratio=config.restart_drop_ratio, bw=bw, hold=hold,
    )
    exprs: dict[str, str] = {
        # A limit of 0 (outside the contract) must not divide: it is dropped.
        q.LIMIT: _held(config, c.MEMORY_LIMIT_BYTES, g) + " > 0",
        q.UNRECLAIMABLE: _held(config, c.MEMORY_UNRECLAIMABLE_BYTES, g),
        q.WORKING_SET: _held(config, c.MEMORY_WORKING_SET_BYTES, g),
        q.UNRECLAIMABLE_RATIO: f"{q.UNRECLAIMABLE} / {q.LIMIT}",
        q.HEADROOM: f"clamp_min({q.LIMIT} - {q.UNRECLAIMABLE}, 0)",
        q.HEADROOM_LOWEST: expr(
            "min_over_time(${h}[${w}])", h=q.HEADROOM, w=duration(config.peak_window_s)),
        q.OWNER: expr(
            """
            (
                ${h}{container!=""}
              <= on ${pod} group_left ()
                (${h}{container=""} + clamp_min(${ratio} * ${limit}{container=""}, ${bytes}))
              or
                ${h}{container!=""} unless on ${pod} ${h}{container=""}
            ) * 0 + 1
            """,
            h=q.HEADROOM, limit=q.LIMIT, pod=by(*config.pod_labels),
            ratio=config.owner_tolerance_ratio, bytes=config.owner_tolerance_bytes,
        ),
        # A container's own fall, or (for the pod-level cgroup) any of its containers'.
        q.RESTART: expr(
            """
            (
                ${drop}
              or
                ${u}{container=""}
              and on ${pod}
                (${drop_c})
            ) * 0 + 1
            """,
            drop=restart_drop, u=q.UNRECLAIMABLE, pod=by(*config.pod_labels),
            drop_c=restart_drop.replace(q.UNRECLAIMABLE, q.UNRECLAIMABLE + '{container!=""}'),
        ),
        # Taken on the aggregated series: an exporter instance change is not a slope.
        q.UNRECLAIMABLE_SLOPE: expr(
            """
            deriv(${u}[${w}])
              and
            ${spans}
            """,
            u=q.UNRECLAIMABLE, w=duration(config.slope_window_s),
            spans=_spans(q.UNRECLAIMABLE, config.slope_window_s, config.min_span_ratio),
        ),
        q.UNRECLAIMABLE_SUSTAINED_SHORT: sustained(
            config.short_window_s, config.short_sustain_s),
        q.UNRECLAIMABLE_SUSTAINED_MEDIUM: sustained(
            config.medium_window_s, config.medium_sustain_s),
        # From the raw series, so a baseline exists as soon as the rules are loaded.
        q.UNRECLAIMABLE_BASELINE: expr(
            "min by ${g} (min_over_time(${raw}[${bw}]))", g=gb, raw=unrecl, bw=bw),
        # Only for a workload that existed two windows ago and did not restart since:
        # a new pod's model load or a restart's dip is not growth.
        q.UNRECLAIMABLE_BASELINE_RISE: expr(
            """
            (
                ${baseline}
              - min by ${g} (min_over_time(${raw}[${bw}] offset ${bw}))
            )
            and on ${g} max by ${g} (present_over_time(${raw}[${hold}] offset ${bw2}))
            unless on ${g} present_over_time(${restart}[${bw2}])
            """,
            baseline=q.UNRECLAIMABLE_BASELINE, g=gb, raw=unrecl, bw=bw, hold=hold,
            bw2=duration(2 * config.baseline_window_s), restart=q.RESTART,
        ),
        # The rate at which it grows while it grows (a nightly burst, a steady leak), kept
        # only while the baseline rises: diurnal ramps and batches return to one floor.
        q.UNRECLAIMABLE_GROWTH_RATE: expr(
            """
            max_over_time(${slope}[${bw}]) > 0
            and ${rise} > ${min_bytes}
            and ${rise} > ${min_ratio} * ${limit}
            """,
            slope=q.UNRECLAIMABLE_SLOPE, bw=bw, rise=q.UNRECLAIMABLE_BASELINE_RISE,
            min_bytes=config.min_baseline_rise_bytes,
            min_ratio=config.min_baseline_rise_ratio, limit=q.LIMIT,
        ),
        q.TIME_TO_LIMIT: f"{q.HEADROOM} / ({q.UNRECLAIMABLE_SLOPE} > 0)",
        q.WORKING_SET_BASELINE: expr(
            "min by ${g} (min_over_time(${raw}[${bw}]))",
            g=gb, raw=_raw(config, c.MEMORY_WORKING_SET_BYTES), bw=bw,
        ),
        q.PROCESS_ATTRIBUTED: attributed("anon", "rss_anon") + "\n+\n"
        + attributed("shmem", "rss_shmem"),
        # Container level: its own processes. Pod level: every container's processes,
        # joined on the pod labels (the pod cgroup has container="").
        q.HIDDEN: expr(
            """
            clamp_min(${u}{container!=""} - ${attr}, 0)
            or
            clamp_min(
                ${u}{container=""}
              - on ${pod} group_left ()
                sum by ${pod} (${attr}),
              0
            )
            """,
            u=q.UNRECLAIMABLE, attr=q.PROCESS_ATTRIBUTED, pod=by(*config.pod_labels),
        ),
        q.HIDDEN_BASELINE_RISE: expr(
            """
            (
                min_over_time(${h}[${bw}])
              - min_over_time(${h}[${bw}] offset ${bw})
            )
            and present_over_time(${h}[${hold}] offset ${bw2})
            """,
            h=q.HIDDEN, bw=bw, hold=hold, bw2=duration(2 * config.baseline_window_s),
        ),
        q.TMPFS_USED: _held(config, c.TMPFS_USED_BYTES, (*g, "mount")),
        q.TMPFS_SIZE: _held(config, c.TMPFS_SIZE_BYTES, (*g, "mount")) + " > 0",
        # With no usage reported (or a usage that means in-flight transfers, not
        # residency), the whole tier is assumed still to come.
        q.KV_OFFLOAD_PENDING: expr(
            """
            sum by ${g} (
                ${cap}
              * on ${kv}
                clamp(1 - ${usage}, 0, 1)
              or
                ${cap}
            )
            """,
            g=gb, kv=by(*kv),
            cap=_held(config, c.VLLM_KV_CACHE_CAPACITY_BYTES, kv, medium="cpu"),
            usage=_held(config, c.VLLM_KV_CACHE_USAGE_RATIO, kv, medium="cpu"),
        ),
        q.NODE_AVAILABLE: _held(config, c.NODE_MEMORY_AVAILABLE_BYTES, config.node_labels),
    }
    assert tuple(exprs) == q.RECORDING_RULES
    return [{"record": name, "expr": text} for name, text in exprs.items()]


# --- alerting rules ----------------------------------------------------------------------
def _alert(
    config: Config,
    name: str,
    condition: str,
    severity: str,
    for_s: int,
    summary: str,
    description: str,
    keep_firing_s: int | None = None,
) -> Rule:
    """``keep_firing_s``: 0 for none; None for the config's (a gap must not resolve)."""
    rule: Rule = {"alert": name, "expr": condition}
    if for_s:
        rule["for"] = duration(for_s)
    keep = config.keep_firing_s if keep_firing_s is None else keep_firing_s
    if keep:
        rule["keep_firing_for"] = duration(keep)
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": config.runbook_url(name),
    }
    return rule


def _windows(config: Config, horizon_s: int) -> str:
    """horizon / baseline window, as a PromQL number."""
    return number(round(horizon_s / config.baseline_window_s, 6))


def _rise_cap(config: Config, horizon_s: int) -> str:
    """The growth a horizon may extrapolate is capped by the baseline's rise: one
    window's worth, or more for a horizon longer than the window. A nightly burst that
    grows fast for two hours does not extrapolate beyond what the baseline gained."""
    factor = max(1.0, horizon_s / config.baseline_window_s)
    return q.UNRECLAIMABLE_BASELINE_RISE + ("" if factor == 1 else f" * {number(factor)}")


def filling_up_warning(config: Config) -> Rule:
    h = config.fill_warning_horizon_s
    long_h = config.fill_warning_long_horizon_s
    # Short horizon: the growth expected in h at the rate it grows while it grows,
    # capped by the baseline's rise (a nightly burst does not extrapolate beyond it).
    # Long horizon: a rise seen in each of the last two windows is a multi-day trend.
    condition = expr(
        """
            ${h} < ${rate} * ${h_s}
          and
            ${h} < ${cap}
        or
            ${h} < ${rise} * ${long_windows}
          and
            ${h} < (${rise} offset ${bw}) * ${long_windows}
          and on ${g}
            ${rate}
        """,
        h=q.HEADROOM_LOWEST, rate=q.UNRECLAIMABLE_GROWTH_RATE,
        rise=q.UNRECLAIMABLE_BASELINE_RISE,
        h_s=h, cap=_rise_cap(config, h), long_windows=_windows(config, long_h),
        bw=duration(config.baseline_window_s), g=by(*config.group_labels),
    )
    return _alert(
        config, "HeadroomMemoryFillingUp", owned(config, condition), "warning",
        config.fill_warning_for_s,
        f"Unreclaimable memory of {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} is "
        f"predicted to reach its limit within {duration(long_h)}.",
        f"Memory the kernel cannot reclaim in {_WHERE} keeps growing: its "
        f"{duration(config.baseline_window_s)} baseline rose by "
        f"{_workload_query(config, q.UNRECLAIMABLE_BASELINE_RISE, 'humanize1024')}B and "
        f"it grows by up to "
        f"{_workload_query(config, q.UNRECLAIMABLE_GROWTH_RATE, 'humanize1024', '3600')}"
        f"B/h. Only {{{{ $value | humanize1024 }}}}B are left below the "
        f"{_workload_query(config, q.LIMIT, 'humanize1024')}B limit "
        f"({_workload_query(config, q.UNRECLAIMABLE_RATIO, 'humanizePercentage')} used): "
        f"the pod will be OOM-killed within {duration(h)} (a one-day rise) to "
        f"{duration(long_h)} (a rise every day) unless the growth stops. The working set "
        f"may look flat: page cache is being squeezed out.",
        # A ticket for a trend over days does not resolve because one hour's figures
        # dipped: it keeps firing for its horizon after its condition last held.
        keep_firing_s=max(h, config.keep_firing_s),
    )


def filling_up_critical(config: Config) -> Rule:
    h = config.fill_critical_horizon_s
    # Three ways to be an hour from the limit; each needs growth that is still going on:
    # a fast ramp at its sustained short slope; the hour's trend while the medium slope
    # has stayed positive (a ramp over hours); the daily growth rate (slow leaks, nightly
    # growth), capped by an hour's rise of the baseline.
    condition = expr(
        """
            ${h} < ${fast} * ${h_s}
          and
            ${ratio} > ${fast_min}
        or
            ${h} < ${slope} * ${h_s}
          and
            ${medium} > 0
        or
            ${h} < ${rate} * ${h_s}
          and
            ${h} < ${cap}
          and
            ${slope} > 0
        """,
        h=q.HEADROOM_LOWEST, fast=q.UNRECLAIMABLE_SUSTAINED_SHORT,
        medium=q.UNRECLAIMABLE_SUSTAINED_MEDIUM, rate=q.UNRECLAIMABLE_GROWTH_RATE,
        rise=q.UNRECLAIMABLE_BASELINE_RISE, slope=q.UNRECLAIMABLE_SLOPE,
        ratio=q.UNRECLAIMABLE_RATIO, fast_min=config.fill_fast_min_ratio,
        # The page must be out (its `for:` elapsed) when the kill is an hour away.
        h_s=h + config.fill_critical_for_s, cap=_rise_cap(config, h),
    )
    return _alert(
        config, "HeadroomMemoryFillingUp", owned(config, condition), "critical",
        config.fill_critical_for_s,
        f"{{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} will be OOM-killed within "
        f"{duration(h)}.",
        f"Unreclaimable memory of {_WHERE} is growing now "
        f"({_workload_query(config, q.UNRECLAIMABLE_SLOPE, 'humanize1024', '3600')}B/h "
        f"over the last {duration(config.slope_window_s)}) and only "
        f"{{{{ $value | humanize1024 }}}}B are left below the "
        f"{_workload_query(config, q.LIMIT, 'humanize1024')}B limit "
        f"({_workload_query(config, q.UNRECLAIMABLE_RATIO, 'humanizePercentage')} used). "
        f"At this rate the kernel OOM-kills it within {duration(h)}.",
        # "Within the hour" stays true for the hour: a page is not resolved and re-sent
        # because the slope or the peak dipped for a few minutes.
        keep_firing_s=max(h, config.keep_firing_s),
    )


def near_limit(config: Config) -> Rule:
    # A workload that is filling up is FillingUp's (a slow leak crosses 95 % a day
    # before the kill, a ramp minutes before its page): this pages a pod that sits near
    # its limit without a daily trend or a ramp going on.
    condition = expr(
        """
        ${ratio} > ${threshold}
        unless on ${g} ${rate}
        unless on ${g} ${medium} > 0
        """,
        ratio=q.UNRECLAIMABLE_RATIO, threshold=config.near_limit_ratio,
        g=by(*config.group_labels), rate=q.UNRECLAIMABLE_GROWTH_RATE,
        medium=q.UNRECLAIMABLE_SUSTAINED_MEDIUM,
    )
    return _alert(
        config, "HeadroomMemoryNearLimit", owned(config, condition), "critical",
        config.near_limit_for_s,
        "{{ $labels.namespace }}/{{ $labels.pod }} has almost no reclaimable memory left.",
        f"Memory the kernel cannot reclaim is at {{{{ $value | humanizePercentage }}}} of "
        f"the {_workload_query(config, q.LIMIT, 'humanize1024')}B limit of {_WHERE}; the "
        f"next allocation that does not fit triggers the OOM killer.",
    )


def reclaim_at_limit(config: Config) -> Rule:
    # max, not sum, over instances: two exporters overlapping in a rollout see one counter.
    condition = expr(
        """
        ${ratio} > ${threshold}
        and on ${g}
        max by ${g} (rate(${events}[${w}])) > 0
        """,
        ratio=q.UNRECLAIMABLE_RATIO, threshold=config.high_ratio,
        g=by(*config.group_labels),
        events=_raw(config, c.MEMORY_EVENTS_TOTAL, event="max"),
        w=duration(config.reclaim_window_s),
    )
    return _alert(
        config, "HeadroomMemoryReclaimAtLimit", owned(config, condition), "warning",
        config.reclaim_for_s,
        "The kernel keeps reclaiming memory at the limit of "
        "{{ $labels.namespace }}/{{ $labels.pod }}.",
        f"{_WHERE} keeps hitting its memory limit (memory.events max / memory.failcnt "
        f"rising) while {{{{ $value | humanizePercentage }}}} of the limit cannot be "
        f"reclaimed: the kernel is squeezing the last page cache out, and an OOM kill "
        f"follows if it grows further.",
    )


def hidden_memory_growth(config: Config) -> Rule:
    condition = expr(
        """
        ${rise}{container=""} > ${min_bytes}
        and
        ${rise}{container=""} > ${min_ratio} * ${limit}
        """,
        rise=q.HIDDEN_BASELINE_RISE, min_bytes=config.hidden_min_rise_bytes,
        min_ratio=config.hidden_min_rise_ratio, limit=q.LIMIT,
    )
    return _alert(
        config, "HeadroomHiddenMemoryGrowth", condition, "warning", config.hidden_for_s,
        "Memory no process accounts for grows in {{ $labels.namespace }}/"
        "{{ $labels.pod }}.",
        f"The baseline of memory that no process of pod {{{{ $labels.namespace }}}}/"
        f"{{{{ $labels.pod }}}} maps rose by {{{{ $value | humanize1024 }}}}B over "
        f"{duration(config.baseline_window_s)} (now "
        f"{_workload_query(config, q.HIDDEN, 'humanize1024')}B). It is shmem no process "
        f"maps (files in /dev/shm or a memory-backed emptyDir), kernel memory, or "
        f"charges left by a killed container: no process RSS shows it.",
    )


def shared_memory_filling_up(config: Config) -> Rule:
    w = config.shm_fill_window_s
    condition = expr(
        """
        ${used} / ${size} > ${full}
        and
        predict_linear(${used}[${w}], ${horizon}) > ${size}
        and
        ${spans}
        """,
        used=q.TMPFS_USED, size=q.TMPFS_SIZE,
        full=round(1 - config.shm_fill_max_free_ratio, 6), w=duration(w),
        horizon=config.shm_fill_horizon_s,
        spans=_spans(q.TMPFS_USED, w, config.min_span_ratio),
    )
    return _alert(
        config, "HeadroomSharedMemoryFillingUp", condition, "warning",
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
    condition = expr(
        "${orphaned} > ${min_bytes}",
        orphaned=_held(config, c.TMPFS_ORPHANED_BYTES, (*config.group_labels, "mount")),
        min_bytes=config.stale_shm_min_bytes,
    )
    return _alert(
        config, "HeadroomStaleSharedMemory", condition, "warning", config.stale_shm_for_s,
        "{{ $value | humanize1024 }}B of files in {{ $labels.mount }} of "
        "{{ $labels.namespace }}/{{ $labels.pod }} belong to no live process.",
        "Files in the memory-backed tmpfs {{ $labels.mount }} of pod "
        "{{ $labels.namespace }}/{{ $labels.pod }} hold {{ $value | humanize1024 }}B that "
        "no live process of the pod has open or mapped: typically left by a killed or "
        "restarted container. They stay charged to the pod's memory (shmem, never "
        "reclaimed without swap) until deleted or the pod goes.",
    )


def kv_offload_will_not_fit(config: Config) -> Rule:
    pod = by(*config.pod_labels)
    # vLLM series carry the vLLM container's labels: compare with that container's own
    # headroom and, joined on the pod labels, with the pod-level cgroup's (container="").
    condition = expr(
        """
        ${pending} - ${h} > 0
        or
        ${pending} - on ${pod} group_left () ${h}{container=""} > 0
        """,
        pending=q.KV_OFFLOAD_PENDING, h=q.HEADROOM, pod=pod,
    )
    return _alert(
        config, "HeadroomKVOffloadWillNotFit", condition, "warning",
        config.kv_offload_for_s,
        "vLLM's CPU KV-offload tier in {{ $labels.namespace }}/{{ $labels.pod }} does "
        "not fit in the memory left.",
        f"The part of the CPU KV-offload tier of {_WHERE} not yet in use "
        f"({_workload_query(config, q.KV_OFFLOAD_PENDING, 'humanize1024')}B; the whole "
        f"tier when vLLM reports no usage) is larger than the memory left below the "
        f"limit, by {{{{ $value | humanize1024 }}}}B. The pod will be OOM-killed when the "
        f"tier fills, however slowly that happens.",
    )


def node_memory_pressure(config: Config) -> Rule:
    node = by(*config.node_labels)
    total = _held(config, c.NODE_MEMORY_TOTAL_BYTES, config.node_labels)
    condition = expr(
        """
        ${avail} < ${ratio} * ${total}
        and
        predict_linear(${avail}[${w}], ${horizon}) < ${eviction}
        and
        ${spans}
        """,
        avail=q.NODE_AVAILABLE, ratio=config.node_pressure_ratio, total=total,
        w=duration(config.slope_window_s), horizon=config.node_pressure_horizon_s,
        eviction=config.node_eviction_bytes,
        spans=_spans(q.NODE_AVAILABLE, config.slope_window_s, config.min_span_ratio),
    )
    # The pods without a limit of their own on that node (their effective limit is the
    # node's memory), fastest growing first: the kubelet evicts among them.
    on_node = ", ".join(f"{x}=%q" for x in config.node_labels)
    args = " ".join(f"$labels.{x}" for x in config.node_labels)
    limit = series(c.MEMORY_LIMIT_BYTES, config.selector, 'container=""', on_node)
    ranking = expr(
        "sort_desc(topk(3, ${slope}{container=\"\"} and on ${pod} "
        "(${limit} >= on ${node} group_left () ${no_limit} * ${node_total})))",
        slope=q.UNRECLAIMABLE_SLOPE, pod=by(*config.pod_labels), limit=limit, node=node,
        no_limit=config.no_limit_ratio,
        node_total=_raw(config, c.NODE_MEMORY_TOTAL_BYTES),
    ).replace('"', '\\"')
    growers = (
        f'{{{{ range printf "{ranking}" {args} | query }}}}'
        "{{ .Labels.namespace }}/{{ .Labels.pod }} (+{{ .Value | humanize1024 }}B/s) "
        "{{ end }}"
    )
    return _alert(
        config, "HeadroomNodeMemoryPressure", condition, "critical",
        config.node_pressure_for_s,
        "Node {{ $labels." + config.node_labels[0] + " }} is running out of memory: "
        "pods without a memory limit will be evicted.",
        "MemAvailable of node {{ $labels." + config.node_labels[0] + " }} is "
        "{{ $value | humanize1024 }}B and falling toward the kubelet's eviction "
        f"threshold ({number(config.node_eviction_bytes)} bytes assumed) within "
        f"{duration(config.node_pressure_horizon_s)}. Pods without a memory limit of "
        f"their own, fastest growing first: {growers}",
    )


def pod_oom_killed(config: Config) -> Rule:
    pod = config.pod_labels
    w = duration(config.oom_window_s)
    hold = duration(config.hold_s)
    # Per raw series, now minus the highest value it had over the lookback one window
    # ago: a series that is merely new (an exporter restart re-reporting past kills, a
    # new instance) has no past and counts nothing; a counter that went down and came
    # back (a fresh exporter showing 0, then the kills it re-read) counts nothing.
    def kills(raw: str) -> str:
        return expr(
            "clamp_min(last_over_time(${raw}[${hold}]) - max_over_time(${raw}[${back}] "
            "offset ${w}), 0)",
            raw=raw, hold=hold, w=w, back=duration(config.oom_lookback_s),
        )

    # The watcher counts per process; the kernel per cgroup: on cgroup v1 only the
    # container's counter moves (v1 never counts a child's kill in the pod cgroup), on v2
    # the pod's counts every container's too: max over the pod's cgroups, not their sum.
    condition = expr(
        """
        sum by ${pod_p} (${watcher}) > 0
        or on ${pod}
        max by ${pod} (${kernel}) > 0
        """,
        pod_p=by(*pod, "process"), pod=by(*pod),
        watcher=kills(_raw(config, c.OOM_KILLS_TOTAL)),
        kernel=kills(_raw(config, c.MEMORY_EVENTS_TOTAL, event="oom_kill")),
    )
    return _alert(
        config, "HeadroomPodOOMKilled", condition, "warning", 0,
        "A process of {{ $labels.namespace }}/{{ $labels.pod }} was OOM-killed.",
        "The kernel OOM-killed {{ with $labels.process }}{{ . }}{{ else }}a process"
        "{{ end }} in pod {{ $labels.namespace }}/{{ $labels.pod }} "
        f"({{{{ $value | humanize }}}} kill(s) in the last {w}). Open headroom's OOM "
        "post-mortem for what grew before it.",
        keep_firing_s=0,
    )


def exporter_down(config: Config) -> Rule:
    up = series("up", config.selector)
    return _alert(
        config, "HeadroomExporterDown", f"{up} == 0\nor\nabsent({up})", "warning",
        config.exporter_down_for_s,
        "headroom exporter {{ with $labels.instance }}{{ . }} {{ end }}is down.",
        "Prometheus cannot scrape the headroom exporter"
        "{{ with $labels.instance }} at {{ . }}{{ end }}: none of headroom's memory "
        "alerts can fire for the pods on that node.",
    )


def collector_failing(config: Config) -> Rule:
    condition = expr(
        "avg_over_time(${success}[${w}]) < 0.5",
        success=_raw(config, c.COLLECTOR_SUCCESS), w=duration(config.collector_window_s),
    )
    return _alert(
        config, "HeadroomCollectorFailing", condition, "warning", config.collector_for_s,
        "headroom collector {{ $labels.collector }} on {{ $labels.instance }} is failing.",
        "The {{ $labels.collector }} collector of the headroom exporter on "
        "{{ $labels.instance }} succeeded on only {{ $value | humanizePercentage }} of "
        f"scrapes over {duration(config.collector_window_s)}: the series it feeds are "
        "missing or stale. See the exporter's log.",
    )


def vllm_scrape_failing(config: Config) -> Rule:
    condition = expr(
        "max by ${g} (avg_over_time(${up}[${w}])) < 0.5",
        g=by(*config.group_labels), up=_raw(config, c.VLLM_UP),
        w=duration(config.vllm_scrape_window_s),
    )
    return _alert(
        config, "HeadroomVLLMScrapeFailing", condition, "warning",
        config.vllm_scrape_for_s,
        "headroom cannot read vLLM's /metrics in {{ $labels.namespace }}/"
        "{{ $labels.pod }}.",
        f"headroom read the /metrics of the vLLM in {_WHERE} on only "
        f"{{{{ $value | humanizePercentage }}}} of scrapes over "
        f"{duration(config.vllm_scrape_window_s)}: the KV-cache series and "
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
                stale_shared_memory(config),
                kv_offload_will_not_fit(config),
                node_memory_pressure(config),
                pod_oom_killed(config),
            ],
        },
        {
            "name": f"{p}-exporter",
            "rules": [exporter_down(config), collector_failing(config),
                      vllm_scrape_failing(config)],
        },
    ]


__all__ = ["groups", "owned", "recording_rules"]
