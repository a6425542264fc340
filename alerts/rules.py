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


def _spans(name: str, age_s: int, window_s: int) -> str:
    """Present when ``name`` had a sample ``age_s`` to ``age_s + window_s`` ago: the
    series spans enough history for a slope to mean something (a new series' first
    samples do not). ``window_s`` holds two samples at the slowest evaluation interval."""
    return f"present_over_time({name}[{duration(window_s)}] offset {duration(age_s)})"


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


def _top_grower(config: Config) -> str:
    """Go template naming what grows in the alert's cgroup: "EngineCore anon +1.5GiB/day"
    (the process and the kind) and how /dev/shm moves, from TOP_GROWER and KIND_GROWTH."""
    matchers = ",".join(f"{x}=%q" for x in config.group_labels)
    args = " ".join(f"$labels.{x}" for x in config.group_labels)
    # /dev/shm is the pod's (its pod-level cgroup is charged), whichever cgroup binds.
    pod_m = ",".join(f"{x}=%q" for x in config.pod_labels)
    pod_args = " ".join(f"$labels.{x}" for x in config.pod_labels)
    return (
        f'{{{{ range printf "{q.TOP_GROWER}{{{matchers}}} * 86400" {args} | query }}}}'
        "{{ with .Labels.process }}{{ . }} {{ end }}{{ .Labels.kind }} "
        "+{{ .Value | humanize1024 }}B/day{{ end }}"
        f'{{{{ range printf "{q.KIND_GROWTH}{{{pod_m},container=\\"\\",kind=\\"dev_shm\\"}}'
        f' * 86400" {pod_args} | query }}}}; /dev/shm '
        "{{ if gt .Value 1048576.0 }}+{{ .Value | humanize1024 }}B/day{{ else }}flat"
        "{{ end }}{{ end }}"
    )


def _ttl_text(config: Config) -> str:
    """Go template: the time to limit and the horizon that binds."""
    matchers = ",".join(f"{x}=%q" for x in config.group_labels)
    args = " ".join(f"$labels.{x}" for x in config.group_labels)
    return (
        f'{{{{ range printf "{q.TIME_TO_LIMIT}{{{matchers}}}" {args} | query }}}}'
        "{{ .Value | humanizeDuration }} (the {{ .Labels.horizon }} horizon binds)"
        "{{ end }}"
    )


_WHERE = (
    "{{ if $labels.container }}container {{ $labels.container }} of pod "
    "{{ $labels.namespace }}/{{ $labels.pod }}{{ else }}pod {{ $labels.namespace }}/"
    "{{ $labels.pod }} (pod-level cgroup){{ end }}"
)


def binding(config: Config, condition: str) -> str:
    """``condition`` (per workload) kept only on the cgroup whose limit binds."""
    return expr(
        """
        (
          ${cond}
        )
        and on ${g} ${binding} == 1
        """,
        cond=_indent(condition, 2), g=by(*config.group_labels), binding=q.BINDING,
    )


def hysteresis(config: Config, alert: str, severity: str, fire: str, clear: str,
               labels: tuple[str, ...] | None = None) -> str:
    """Fires on ``fire``; once firing, stays while ``clear`` holds (a looser level): a
    condition that flickers on noise does not resolve a notification and send another.
    ``labels``: what identifies the alert (the group labels unless given)."""
    return expr(
        """
            ${fire}
        or
            (
              ${clear}
            )
          and on ${g}
            ALERTS{alertname="${alert}", severity="${severity}", alertstate="firing"}
        """,
        fire=_indent(fire, 4), clear=_indent(clear, 6),
        g=by(*(config.group_labels if labels is None else labels)),
        alert=alert, severity=severity,
    )


def _indent(text: str, n: int) -> str:
    return text.replace("\n", "\n" + " " * n)


# --- recording rules ---------------------------------------------------------------------
def _rules(rules_: list[tuple[str, str]], helps: dict[str, str]) -> list[Rule]:
    """Recording rules from (name, expression) pairs, in the order ``helps`` documents
    them; ``NAME\tHORIZON`` records NAME with that horizon label, ``NAME\tLABEL=VALUE``
    with that label."""
    out: list[Rule] = []
    for key, text in rules_:
        name, _, label = key.partition("\t")
        rule: Rule = {"record": name, "expr": text}
        if label:
            k, _, v = label.rpartition("=")
            rule["labels"] = {k or "horizon": v}
        out.append(rule)
    names = [r["record"] for r in out if r["record"] != q.GROWTH or q.GROWTH in helps]
    assert tuple(dict.fromkeys(names)) == tuple(helps), "documented order"
    return out


def pattern_windows_s(config: Config) -> tuple[int, ...]:
    """How far ahead the daily pattern looks: 1, 2, 3 and 6 hourly windows."""
    return tuple(k * config.hourly_window_s for k in (1, 2, 3, 6))


def _pattern_ttl(config: Config) -> str:
    """Seconds until the limit by the daily pattern: the first window ahead whose
    pattern peak reaches the limit in force now (its length: an upper bound)."""
    parts = [
        expr(
            "(last_over_time(${peak}{within=\"${w}\"}[${hold}]) >= on ${g} group_left () "
            "${limit}) * 0 + ${s}",
            peak=q.PATTERN_PEAK, w=duration(w), hold=duration(config.lasting_hold_s),
            g=by(*config.group_labels), limit=q.LIMIT, s=w)
        for w in pattern_windows_s(config)
    ]
    return f"min by {by(*config.group_labels)} (\n    " + "\n  or\n    ".join(parts) + "\n)"


def _climb_beyond_pattern(config: Config) -> str:
    """1 where a climb goes beyond what the recurring peaks and their lasting trend
    explain (a sawtooth's tooth, a daily swing's climb or a nightly batch back at
    yesterday's level is not): above the envelope by a margin plus a day of the lasting
    trend; or by ``fill_beyond_trend_s`` of it while the lasting horizon reaches the
    limit within the envelope window; or no envelope yet."""
    g = by(*config.group_labels)
    hold = duration(config.lasting_hold_s)
    # The margin counts against peaks that recur, not against a climb's own last hours:
    # where the envelope is no higher than the hour before the last one reached, it is
    # the climb itself (a steady leak, even a noisy one), and there is no margin.
    env = expr(
        """
        last_over_time(${e}[${hold}])
        + on ${g}
        (
            ${r} * ${limit}
          unless on ${g}
            last_over_time(${e}[${hold}])
              <= on ${g}
            max_over_time(${hmax}[${recent}] offset ${hw})
          or on ${g}
            ${limit} * 0
        )""",
        e=q.PEAK_ENVELOPE, hold=hold, g=g, r=config.fill_beyond_peaks_ratio,
        limit=q.LIMIT, hmax=q.HOURLY_MAX, recent=hold,
        hw=duration(config.hourly_window_s))
    rate = f'last_over_time({q.GROWTH}{{horizon="lasting"}}[{hold}])'
    return expr(
        """
        (
            ${u} > on ${g} (${env} + on ${g} ${bw} * ${rate} or ${env})
          or
            ${u} unless on ${g} last_over_time(${e}[${hold}])
          or
            ${u} > on ${g} (${env} + on ${g} ${beyond} * ${rate})
            and on ${g}
            ${ttl}{horizon="lasting"} < ${bw}
        ) * 0 + 1
        """,
        u=q.UNRECLAIMABLE, g=g, env=env, bw=config.baseline_window_s, rate=rate,
        e=q.PEAK_ENVELOPE, hold=hold, beyond=config.fill_beyond_trend_s,
        ttl=q.TIME_TO_LIMIT_BY_HORIZON)


def fast_recording_rules(config: Config) -> list[Rule]:
    """Evaluated every evaluation interval: the figures, the binding cgroup, the short
    and medium horizons and the time to limit."""
    g = config.group_labels
    gb = by(*g)
    pod = by(*config.pod_labels)
    kv = (*g, "model_name", "engine")
    hold_lasting = duration(config.lasting_hold_s)

    def per_process(pss_kind: str, rss_kind: str) -> str:
        # PSS where the exporter read it (it splits shared pages), else RSS.
        return expr(
            "(\n  ${pss}\nor\n  ${rss}\n)",
            pss=_held(config, c.PROCESS_MEMORY_PSS_BYTES, (*g, "process"), kind=pss_kind),
            rss=_held(config, c.PROCESS_MEMORY_BYTES, (*g, "process"), kind=rss_kind),
        )

    def growth(slope: str, sustain_s: int, window_s: int, climbing: bool = False) -> str:
        # The slowest slope over the sustain window, once the series spans both; for the
        # short horizon only while the figure still makes new highs.
        text = expr(
            """
            min_over_time(${slope}[${s}]) > 0
              and
            ${spans}
            """,
            slope=slope, s=duration(sustain_s),
            spans=_spans(q.UNRECLAIMABLE, window_s + sustain_s, 5 * 60),
        )
        if not climbing:
            return text
        return expr(
            """
            ${text}
              and
            ${u} > max_over_time(${u}[${w}] offset ${lag})
            """,
            text=text, u=q.UNRECLAIMABLE, w=duration(config.short_window_s),
            lag=duration(config.climbing_lag_s))

    tol = expr("clamp_min(${r} * ${limit}{container=\"\"}, ${b})",
               r=config.owner_tolerance_ratio, limit=q.LIMIT, b=config.owner_tolerance_bytes)
    peak_headroom = expr(
        "clamp_min(${limit} - max_over_time(${u}[${w}]), 0)",
        limit=q.LIMIT, u=q.UNRECLAIMABLE, w=duration(config.peak_window_s))
    envelope = f"last_over_time({q.PEAK_ENVELOPE}[{hold_lasting}])"
    lasting_level = expr(
        "(${env} > max_over_time(${u}[${w}]) or max_over_time(${u}[${w}]))",
        env=envelope, u=q.UNRECLAIMABLE, w=duration(config.peak_window_s))
    rules_: list[tuple[str, str]] = [
        # A limit of 0 (outside the contract) must not divide: it is dropped.
        (q.LIMIT, _held(config, c.MEMORY_LIMIT_BYTES, g) + " > 0"),
        (q.UNRECLAIMABLE, _held(config, c.MEMORY_UNRECLAIMABLE_BYTES, g)),
        (q.WORKING_SET, _held(config, c.MEMORY_WORKING_SET_BYTES, g)),
        (q.UNRECLAIMABLE_RATIO, f"{q.UNRECLAIMABLE} / {q.LIMIT}"),
        (q.HEADROOM, f"clamp_min({q.LIMIT} - {q.UNRECLAIMABLE}, 0)"),
        # A container binds when its own limit comes first; the pod-level cgroup binds
        # when some container's does not (pod-level resources) or it has none.
        (q.BINDING, expr(
            """
                (
                    ${h}{container!=""} <= on ${pod} group_left () (${h}{container=""} + ${tol})
                  or
                    ${h}{container!=""} unless on ${pod} ${h}{container=""}
                ) * 0 + 1
              or
                ${h}{container!=""} * 0
            or
                (
                    ${h}{container=""}
                  and on ${pod}
                    (${h}{container!=""} > on ${pod} group_left () (${h}{container=""} + ${tol}))
                  or
                    ${h}{container=""} unless on ${pod} ${h}{container!=""}
                ) * 0 + 1
              or
                ${h}{container=""} * 0
            """,
            h=q.HEADROOM, pod=pod, tol=tol)),
        # Slopes are taken on the aggregated series: an exporter instance change is not
        # a slope; bytes, not ratios, so a limit change is not one either.
        (q.SLOPE_SHORT, f"deriv({q.UNRECLAIMABLE}[{duration(config.short_window_s)}])"),
        (q.SLOPE_MEDIUM, f"deriv({q.UNRECLAIMABLE}[{duration(config.medium_window_s)}])"),
        (q.GROWTH + "\tshort", growth(q.SLOPE_SHORT, config.short_sustain_s,
                                      config.short_window_s, climbing=True)),
        (q.GROWTH + "\tmedium", growth(q.SLOPE_MEDIUM, config.medium_sustain_s,
                                       config.medium_window_s)),
        # Per horizon, from the limit in force now: short and medium from the recent
        # peak; lasting the sooner of the envelope of the peaks (or the recent peak
        # above it) at the lasting rate and the daily pattern.
        (q.TIME_TO_LIMIT_BY_HORIZON, expr(
            """
                ${peak_headroom}
              / on ${g} group_right ()
                ${growth}{horizon=~"short|medium"}
            or
              min by ${gh} (
                  clamp_min(${limit} - ${level}, 0)
                / on ${g} group_right ()
                  last_over_time(${growth}{horizon="lasting"}[${hold}])
                or
                  label_replace(label_replace(${pattern}, "horizon", "lasting", "", ""),
                                "from", "pattern", "", "")
              )
            """,
            peak_headroom=peak_headroom, g=gb, gh=by(*g, "horizon"), growth=q.GROWTH,
            limit=q.LIMIT, level=lasting_level, hold=hold_lasting,
            pattern=_indent(_pattern_ttl(config), 18))),
        (q.CLIMB_BEYOND_PATTERN, _climb_beyond_pattern(config)),
        (q.TIME_TO_LIMIT, expr(
            """
            bottomk by ${g} (1,
                ${ttl}{horizon=~"short|medium"} and on ${g} ${beyond}
              or
                ${ttl}{horizon="lasting"}
            )
            """,
            g=gb, ttl=q.TIME_TO_LIMIT_BY_HORIZON, beyond=q.CLIMB_BEYOND_PATTERN)),
        (q.PROCESS_MEMORY, expr(
            "${anon}\n+\n${shm}\nor\n${anon}",
            anon=per_process("anon", "rss_anon"), shm=per_process("shmem", "rss_shmem"))),
        (q.PROCESS_ATTRIBUTED, f"sum by {gb} ({q.PROCESS_MEMORY})"),
        (q.MEMORY_KIND, expr(
            "max by ${g} (last_over_time(${raw}[${hold}]))",
            g=by(*g, "kind"), hold=duration(config.hold_s),
            raw=series(c.MEMORY_BYTES, config.selector, 'kind=~"anon|shmem|kernel|sock"'))),
        # Container level: its own processes. Pod level: every container's processes,
        # joined on the pod labels (the pod cgroup has container="").
        (q.HIDDEN, expr(
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
            u=q.UNRECLAIMABLE, attr=q.PROCESS_ATTRIBUTED, pod=pod)),
        (q.TMPFS_USED, _held(config, c.TMPFS_USED_BYTES, (*g, "mount"))),
        (q.TMPFS_SIZE, _held(config, c.TMPFS_SIZE_BYTES, (*g, "mount")) + " > 0"),
        # With no usage reported (or a usage that means in-flight transfers, not
        # residency), the whole tier is assumed still to come.
        (q.KV_OFFLOAD_PENDING, expr(
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
            usage=_held(config, c.VLLM_KV_CACHE_USAGE_RATIO, kv, medium="cpu"))),
        (q.NODE_AVAILABLE, _held(config, c.NODE_MEMORY_AVAILABLE_BYTES, config.node_labels)),
        (q.VLLM_UP, expr(
            "max by ${g} (avg_over_time(${up}[${w}]))",
            g=gb, up=_raw(config, c.VLLM_UP), w=duration(config.vllm_scrape_window_s))),
    ]
    return _rules(rules_, q.FAST_RECORDING_RULE_HELP)


def lasting_recording_rules(config: Config) -> list[Rule]:
    """Evaluated every ``lasting_interval_s``: hourly minima and maxima, and from them the
    floor, the envelope of the peaks, their rise per window (the lasting horizon) and
    the top grower. No rule here reads a day of raw samples."""
    g = config.group_labels
    gb = by(*g)
    pod = by(*config.pod_labels)
    hw = duration(config.hourly_window_s)
    bw = duration(config.baseline_window_s)
    bw_s = config.baseline_window_s
    # "spans both windows": an hourly figure from two windows ago, less one hour.
    old = _spans(q.HOURLY_MIN, 2 * bw_s - config.hourly_window_s, config.hourly_window_s)

    def rise(name: str, agg: str, lag_s: int = 0) -> str:
        lag = f" offset {duration(lag_s)}" if lag_s else ""
        return expr(
            """
            (
                ${agg}_over_time(${name}[${bw}]${lag})
              - ${agg}_over_time(${name}[${bw}] offset ${lag2})
            )
            and on ${g}
            ${old}
            """,
            agg=agg, name=name, bw=bw, lag=lag, lag2=duration(bw_s + lag_s), g=gb, old=old)

    # The growth the binding horizon reads: day over day where the lasting horizon
    # binds the pod, over the last hour otherwise.
    lasting_binds = f'on {pod} {q.TIME_TO_LIMIT}{{horizon="lasting"}}'
    def kg(kinds: str = "") -> str:
        sel = f'{{kind=~"{kinds}"}}' if kinds else ""
        return f"({q.KIND_LASTING_GROWTH}{sel} and {lasting_binds} or {q.KIND_GROWTH}{sel})"

    pg = f"({q.PROCESS_LASTING_GROWTH} and {lasting_binds} or {q.PROCESS_GROWTH})"
    top_kind = f"topk by {gb} (1, {kg()})"
    top_process = expr(
        """
            topk by ${g} (1, ${pg})
          or
            label_replace(topk by ${pod} (1, ${pg}), "container", "", "container", ".*")
        """,
        g=gb, pg=pg, pod=pod)
    period = duration(config.pattern_period_s)

    def day_over_day(selector: str) -> str:
        return expr("(avg_over_time(${s}[${hw}]) - avg_over_time(${s}[${hw}] offset ${p}))"
                    " / ${p_s}", s=selector, hw=hw, p=period, p_s=config.pattern_period_s)

    def per_kind(of: Any) -> str:
        # anon and shmem as they are; kernel + socket buffers as "kernel"; the pod's
        # memory-backed tmpfs as "dev_shm"; memory no process accounts for as "hidden".
        # A file in /dev/shm no process maps grows shmem, dev_shm and hidden at one rate:
        # dev_shm, the name that says where to look, is lifted by 0.1 ppm to win topk's
        # tie (``exporter.oncall.forecast.GROWER_KINDS`` orders the mirror the same way).
        return expr(
            """
                ${anon}
            or
                label_replace(sum by ${g} (${kernel}), "kind", "kernel", "", "")
            or
                label_replace(sum by ${g} (${tmpfs}) * 1.0000001, "kind", "dev_shm", "", "")
            or
                label_replace(${hidden}, "kind", "hidden", "", "")
            """,
            anon=of(f'{q.MEMORY_KIND}{{kind=~"anon|shmem"}}'), g=gb,
            kernel=of(f'{q.MEMORY_KIND}{{kind=~"kernel|sock"}}'), tmpfs=of(q.TMPFS_USED),
            hidden=of(q.HIDDEN))
    # The process that grows most, unless what grows most is no process's memory (files
    # in /dev/shm no process maps, kernel memory, hidden charges).
    named = expr(
        """
        (${top_process}) > 0
        unless on ${g}
        (${top_kind} and ${kg} > 0 unless ${kg_process})
        """,
        top_process=_indent(top_process, 2), g=gb, top_kind=top_kind, kg=kg(),
        kg_process=kg("anon|shmem"))
    rules_: list[tuple[str, str]] = [
        (q.HOURLY_MAX, f"max_over_time({q.UNRECLAIMABLE}[{hw}])"),
        (q.HOURLY_MIN, f"min_over_time({q.UNRECLAIMABLE}[{hw}])"),
        (q.WORKING_SET_HOURLY_MIN, f"min_over_time({q.WORKING_SET}[{hw}])"),
        (q.HIDDEN_HOURLY_MIN, f"min_over_time({q.HIDDEN}[{hw}])"),
        (q.UNRECLAIMABLE_BASELINE, f"min_over_time({q.HOURLY_MIN}[{bw}])"),
        (q.UNRECLAIMABLE_BASELINE_RISE, rise(q.HOURLY_MIN, "min")),
        # Before the last hour: a climb now is compared with what the peaks reached.
        (q.PEAK_ENVELOPE, f"max_over_time({q.HOURLY_MAX}[{bw}] offset {hw})"),
        (q.PEAK_ENVELOPE_RISE, rise(q.HOURLY_MAX, "max", config.hourly_window_s)),
        (q.HOURLY_RANGE, f"{q.HOURLY_MAX} - {q.HOURLY_MIN}"),
        (q.WORKING_SET_BASELINE, f"min_over_time({q.WORKING_SET_HOURLY_MIN}[{bw}])"),
        (q.HIDDEN_BASELINE_RISE, rise(q.HIDDEN_HOURLY_MIN, "min")),
        # Lasting: both the floor and the envelope of the peaks rose (the smaller rise),
        # by more than noise: a daily swing, a sawtooth or a warm-up (the floor rose, the
        # peaks did not) is no lasting growth.
        (q.GROWTH + "\tlasting", expr(
            """
            (
                (${floor} < ${env} or ${env})
              > on ${g}
                clamp_min(${ratio} * ${limit}, ${bytes})
            )
            / ${bw_s}
            """,
            floor=q.UNRECLAIMABLE_BASELINE_RISE, env=q.PEAK_ENVELOPE_RISE, g=gb,
            ratio=config.min_baseline_rise_ratio, limit=q.LIMIT,
            bytes=config.min_baseline_rise_bytes, bw_s=bw_s)),
        # The daily pattern ahead: the hours ahead one period ago (their hourly maxima,
        # recorded every lasting interval), lifted by a period of lasting growth.
        *((q.PATTERN_PEAK + f"\twithin={duration(w)}", expr(
            """
                max_over_time(${hmax}[${span}] offset ${back})
              + on ${g}
                ${growth}{horizon="lasting"} * ${period}
            """,
            hmax=q.HOURLY_MAX, g=gb, growth=q.GROWTH, period=config.pattern_period_s,
            span=duration(w - config.hourly_window_s + 3 * config.lasting_interval_s),
            back=duration(config.pattern_period_s - w)))
          for w in pattern_windows_s(config)),
        (q.KIND_GROWTH, per_kind(lambda sel: f"deriv({sel}[{hw}])")),
        (q.PROCESS_GROWTH, f"deriv({q.PROCESS_MEMORY}[{hw}])"),
        (q.KIND_LASTING_GROWTH, per_kind(day_over_day)),
        (q.PROCESS_LASTING_GROWTH, day_over_day(q.PROCESS_MEMORY)),
        # A process is named when the kind that grows most is a process's (anon, shmem)
        # or no kind is reported; else the kind alone (/dev/shm files, kernel memory).
        (q.TOP_GROWER, expr(
            """
            (
                (${named})
              * on ${g} group_left (kind)
                (topk by ${g} (1, ${kg}) * 0 + 1)
              or on ${g}
                label_replace(${named}, "kind", "anon", "", "")
              or on ${g}
                ${top_kind}
            )
            and on ${g} ${binding} == 1
            """,
            named=_indent(named, 4), g=gb, top_kind=top_kind, kg=kg("anon|shmem"),
            binding=q.BINDING)),
        (q.VLLM_ANSWERED, f"max_over_time({q.VLLM_UP}[{hw}]) > 0"),
    ]
    return _rules(rules_, q.LASTING_RECORDING_RULE_HELP)


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


def _ttl(config: Config, horizons: str) -> str:
    sel = f'{q.TIME_TO_LIMIT_BY_HORIZON}{{horizon=~"{horizons}"}}'
    return f"min by {by(*config.group_labels)} ({sel})"


def filling_up_warning(config: Config) -> Rule:
    def cond(h_s: int) -> str:
        return f"{_ttl(config, 'lasting')} < {h_s}"

    name = "HeadroomMemoryFillingUp"
    condition = hysteresis(config, name, "warning", binding(config, cond(
        config.fill_warning_horizon_s)), binding(config, cond(
            config.fill_warning_clear_horizon_s)))
    return _alert(
        config, name, condition, "warning", config.fill_warning_for_s,
        f"{{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} is predicted to reach its "
        f"memory limit within {duration(config.fill_warning_horizon_s)}.",
        f"The lasting trend of {_WHERE} (the floor and the peaks both rise, day over day) "
        f"reaches the {_workload_query(config, q.LIMIT, 'humanize1024')}B limit in "
        f"{{{{ $value | humanizeDuration }}}}. What grows: {_top_grower(config)}. The "
        f"peaks reached {_workload_query(config, q.PEAK_ENVELOPE, 'humanize1024')}B; the "
        f"working set may look flat while page cache is squeezed out.",
    )


def critical_condition(config: Config, scale: float) -> str:
    """The page's condition with every horizon times ``scale`` (1: fire; more: clear).

    * the recorded time to limit within the critical horizon: a short or medium climb
      that goes beyond the pattern (``CLIMB_BEYOND_PATTERN``), or the lasting horizon
      (the peaks' envelope, the daily pattern); the lasting horizon within the pattern
      page horizon (its windows ahead are whole hours);
    * the peaks at the limit: their envelope reaches it at the lasting rate within the
      lasting page horizon, or within the confirm horizon while a climb that reaches it
      within the fast confirm horizon goes on (a sawtooth whose teeth climb).
    """
    g = by(*config.group_labels)
    hold = duration(config.lasting_hold_s)
    env = f"last_over_time({q.PEAK_ENVELOPE}[{hold}])"
    lasting_rate = f'last_over_time({q.GROWTH}{{horizon="lasting"}}[{hold}])'

    def h(seconds: int) -> str:
        return number(round(seconds * scale))

    return expr(
        """
        min by ${g} (${ttl})
        and on ${g}
        (
            min by ${g} (${ttl}) < ${crit}
        or
            ${lasting} <= ${pattern_page}
        or
            ${env_ttl} < ${lasting_page}
        or
            ${env_ttl} < ${confirm}
          and on ${g}
            ${fast} < ${fast_confirm}
        )
        """,
        # The peaks' own forecast: from the envelope of the peaks before the last hour,
        # not from a tooth climbing now (a sawtooth's tooth above the last peaks is
        # released; the next tooth is what the envelope's trend says).
        env_ttl=f"(clamp_min({q.LIMIT} - {env}, 0) / on {g} {lasting_rate})",
        g=g, ttl=q.TIME_TO_LIMIT, fast=_ttl(config, "short|medium"),
        lasting=_ttl(config, "lasting"),
        pattern_page=h(config.fill_pattern_page_horizon_s),
        # The page must be out (its `for:` elapsed) when the kill is the horizon away.
        crit=h(config.fill_critical_horizon_s + config.fill_critical_for_s),
        lasting_page=h(config.fill_lasting_page_horizon_s),
        confirm=h(config.fill_lasting_confirm_horizon_s),
        fast_confirm=h(config.fill_fast_confirm_horizon_s),
    )


def _crash_loop_hold(config: Config) -> str:
    """A page stays on through a crash loop (the pod recreated under the same name): for
    an hour after a kill, and while memory grows again within the loop window of one.
    One stream of pages; HeadroomPodOOMKilled reports every kill."""
    pod = by(*config.pod_labels)
    g = by(*config.group_labels)

    def killed(window_s: int) -> str:
        return (f"max by {pod} (max_over_time(ALERTS{{alertname=\"HeadroomPodOOMKilled\", "
                f"alertstate=\"firing\"}}[{duration(window_s)}]))")

    return expr(
        """
            min by ${g} (${ttl})
          and on ${pod}
            ${loop}
        or
            ${headroom} * 0
          and on ${pod}
            ${after}
        """,
        g=g, pod=pod, ttl=q.TIME_TO_LIMIT_BY_HORIZON, headroom=q.HEADROOM,
        loop=killed(config.crash_loop_window_s), after=killed(config.oom_lookback_s),
    )


def filling_up_critical(config: Config) -> Rule:
    name = "HeadroomMemoryFillingUp"
    clear = config.fill_critical_clear_horizon_s / config.fill_critical_horizon_s
    condition = hysteresis(config, name, "critical",
                           binding(config, critical_condition(config, 1)),
                           binding(config, critical_condition(config, clear) + "\nor\n"
                                   + _crash_loop_hold(config)))
    return _alert(
        config, name, condition, "critical", config.fill_critical_for_s,
        "{{ $labels.namespace }}/{{ $labels.pod }} will be OOM-killed in about "
        "{{ $value | humanizeDuration }}.",
        f"Unreclaimable memory of {_WHERE} reaches the "
        f"{_workload_query(config, q.LIMIT, 'humanize1024')}B limit in "
        f"{_ttl_text(config)}; "
        f"{_workload_query(config, q.HEADROOM, 'humanize1024')}B are left "
        f"({_workload_query(config, q.UNRECLAIMABLE_RATIO, 'humanizePercentage')} used). "
        f"What grows: {_top_grower(config)}. Act now: the kernel OOM-kills the pod when "
        f"it gets there.",
    )


def near_limit(config: Config) -> Rule:
    # A workload that grows (at any horizon within the last envelope window) is
    # FillingUp's: a slow leak in a big limit sits above 95 % for days before its kill.
    # This pages a pod that sits at its limit without growing.
    name = "HeadroomMemoryNearLimit"
    # ...and only when what is left (below the recent peak) is within the memory's own
    # swing of the last hour, or under a floor: that swing, come again, is the kill.
    def cond(ratio: float, swings: float) -> str:
        return expr(
            """
            ${ratio} > ${threshold}
            and on ${g}
            clamp_min(${limit} - max_over_time(${u}[${w}]), 0)
              < on ${g}
            ${k} * (last_over_time(${range}[${hold}]) > on ${g} ${floor} * ${limit}
                    or on ${g} ${floor} * ${limit})
            unless on ${g} max by ${g} (max_over_time(${growth}[${bw}]))
            """,
            ratio=q.UNRECLAIMABLE_RATIO, threshold=ratio, g=by(*config.group_labels),
            limit=q.LIMIT, u=q.UNRECLAIMABLE, w=duration(config.peak_window_s), k=swings,
            range=q.HOURLY_RANGE, hold=duration(config.lasting_hold_s),
            floor=config.near_limit_min_headroom_ratio,
            growth=q.GROWTH, bw=duration(config.baseline_window_s),
        )

    fire = cond(config.near_limit_ratio, 1)
    clear = cond(config.near_limit_clear_ratio, 2)
    return _alert(
        config, name, hysteresis(config, name, "critical", binding(config, fire),
                                 binding(config, clear)), "critical",
        config.near_limit_for_s,
        "{{ $labels.namespace }}/{{ $labels.pod }} has almost no reclaimable memory left.",
        f"Memory the kernel cannot reclaim is at {{{{ $value | humanizePercentage }}}} of "
        f"the {_workload_query(config, q.LIMIT, 'humanize1024')}B limit of {_WHERE}; the "
        f"next allocation that does not fit triggers the OOM killer.",
    )


def reclaim_at_limit(config: Config) -> Rule:
    # max, not sum, over instances: two exporters overlapping in a rollout see one counter.
    name = "HeadroomMemoryReclaimAtLimit"

    def cond(ratio: float) -> str:
        return expr(
            """
            ${ratio} > ${threshold}
            and on ${g}
            max by ${g} (rate(${events}[${w}])) > 0
            """,
            ratio=q.UNRECLAIMABLE_RATIO, threshold=ratio, g=by(*config.group_labels),
            events=_raw(config, c.MEMORY_EVENTS_TOTAL, event="max"),
            w=duration(config.reclaim_window_s),
        )

    condition = hysteresis(config, name, "warning",
                           binding(config, cond(config.high_ratio)),
                           binding(config, cond(config.high_clear_ratio)))
    return _alert(
        config, name, condition, "warning",
        config.reclaim_for_s,
        "The kernel keeps reclaiming memory at the limit of "
        "{{ $labels.namespace }}/{{ $labels.pod }}.",
        f"{_WHERE} keeps hitting its memory limit (memory.events max / memory.failcnt "
        f"rising) while {{{{ $value | humanizePercentage }}}} of the limit cannot be "
        f"reclaimed: the kernel is squeezing the last page cache out, and an OOM kill "
        f"follows if it grows further.",
    )


def hidden_memory_growth(config: Config) -> Rule:
    name = "HeadroomHiddenMemoryGrowth"

    def cond(part: float) -> str:
        return expr(
            """
            ${rise}{container=""} > ${min_bytes}
            and
            ${rise}{container=""} > ${min_ratio} * ${limit}
            """,
            rise=q.HIDDEN_BASELINE_RISE, min_bytes=part * config.hidden_min_rise_bytes,
            min_ratio=part * config.hidden_min_rise_ratio, limit=q.LIMIT,
        )

    condition = hysteresis(config, name, "warning", cond(1.0), cond(0.5))
    return _alert(
        config, name, condition, "warning", config.hidden_for_s,
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
    name = "HeadroomSharedMemoryFillingUp"
    full = 1 - config.shm_fill_max_free_ratio
    fire = expr(
        """
        ${used} / ${size} > ${full}
        and
        predict_linear(${used}[${w}], ${horizon}) > ${size}
        and
        ${spans}
        """,
        used=q.TMPFS_USED, size=q.TMPFS_SIZE, full=round(full, 6), w=duration(w),
        horizon=config.shm_fill_horizon_s, spans=_spans(q.TMPFS_USED, w // 2, w // 2),
    )
    clear = f"{q.TMPFS_USED} / {q.TMPFS_SIZE} > {number(round(full - 0.1, 6))}"
    condition = hysteresis(config, name, "warning", fire, clear,
                           (*config.group_labels, "mount"))
    return _alert(
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
    orphaned = _held(config, c.TMPFS_ORPHANED_BYTES, (*config.group_labels, "mount"))
    condition = hysteresis(
        config, name, "warning", f"{orphaned} > {config.stale_shm_min_bytes}",
        f"{orphaned} > {config.stale_shm_min_bytes // 2}", (*config.group_labels, "mount"))
    return _alert(
        config, name, condition, "warning", config.stale_shm_for_s,
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
    name = "HeadroomKVOffloadWillNotFit"

    def cond(margin: int) -> str:
        return expr(
            """
            ${pending} - ${h} > ${margin}
            or
            ${pending} - on ${pod} group_left () ${h}{container=""} > ${margin}
            """,
            pending=q.KV_OFFLOAD_PENDING, h=q.HEADROOM, pod=pod, margin=margin,
        )

    condition = hysteresis(config, name, "warning", cond(0),
                           cond(-config.owner_tolerance_bytes))
    return _alert(
        config, name, condition, "warning",
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
    name = "HeadroomNodeMemoryPressure"
    fire = expr(
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
        spans=_spans(q.NODE_AVAILABLE, config.slope_window_s // 2, config.slope_window_s // 2),
    )
    clear = f"{q.NODE_AVAILABLE} < {number(1.5 * config.node_pressure_ratio)} * {total}"
    condition = hysteresis(config, name, "critical", fire, clear, config.node_labels)
    # The pods without a limit of their own on that node (their effective limit is the
    # node's memory), fastest growing first: the kubelet evicts among them.
    on_node = ", ".join(f"{x}=%q" for x in config.node_labels)
    args = " ".join(f"$labels.{x}" for x in config.node_labels)
    limit = series(c.MEMORY_LIMIT_BYTES, config.selector, 'container=""', on_node)
    ranking = expr(
        "sort_desc(topk(3, ${slope}{container=\"\"} and on ${pod} "
        "(${limit} >= on ${node} group_left () ${no_limit} * ${node_total})))",
        slope=q.SLOPE_MEDIUM, pod=by(*config.pod_labels), limit=limit, node=node,
        no_limit=config.no_limit_ratio,
        node_total=_raw(config, c.NODE_MEMORY_TOTAL_BYTES),
    ).replace('"', '\\"')
    growers = (
        f'{{{{ range printf "{ranking}" {args} | query }}}}'
        "{{ .Labels.namespace }}/{{ .Labels.pod }} (+{{ .Value | humanize1024 }}B/s) "
        "{{ end }}"
    )
    return _alert(
        config, name, condition, "critical",
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

    # The watcher counts per process, each kill once (exporter/oom/watcher.py says what
    # one kill is); the kernel's oom_kill event per cgroup, the pod-level cgroup's counting
    # every container's too (v2 by itself, v1 as the exporter sums it from the watcher):
    # max over the pod's cgroups, not their sum.
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
    # Only a vLLM that answered before: one without a listener (vllm run-batch, a
    # worker-only process) never does, and that is a known state, not a failure.
    condition = expr(
        """
        ${up} < 0.5
        and on ${g}
        max_over_time(${answered}[${bw}])
        """,
        g=by(*config.group_labels), up=q.VLLM_UP, answered=q.VLLM_ANSWERED,
        bw=duration(config.baseline_window_s),
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
        {"name": f"{p}.rules", "rules": fast_recording_rules(config)},
        {"name": f"{p}.lasting", "interval": duration(config.lasting_interval_s),
         "rules": lasting_recording_rules(config)},
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


__all__ = ["binding", "fast_recording_rules", "groups", "hysteresis",
           "lasting_recording_rules"]
