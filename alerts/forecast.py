"""The fast recording group: the figures per workload, the binding cgroup, the short and
medium horizons and the time to limit (README "The forecast (recorded series)").

Evaluated every evaluation interval; the lasting horizon it reads comes from the
lasting group (``alerts.lasting``).
"""

from __future__ import annotations

from exporter import catalog as c
from exporter import promql as q
from exporter.promql import Config, by, duration, expr, number

from .build import Rule, exported, held, indent, recording_rules, spans


def pattern_windows_s(config: Config) -> tuple[int, ...]:
    """How far ahead the daily pattern looks: 1, 2, 3 and 6 hourly windows."""
    return tuple(k * config.hourly_window_s for k in (1, 2, 3, 6))


def min_rise(config: Config) -> str:
    """The least rise per envelope window that is growth, not noise, per cgroup."""
    return (f"clamp_min({config.min_baseline_rise_ratio} * {q.LIMIT}, "
            f"{config.min_baseline_rise_bytes})")


def _pattern_ttl(config: Config) -> str:
    """Seconds until the limit by the daily pattern: the first window ahead whose
    pattern peak reaches the limit in force now (its length: an upper bound). Every
    window is compared with the limit at once, and a constant vector per window turns
    its label into its length: the limit of every cgroup is read once, not per window."""
    g = by(*config.group_labels)
    lengths = "\n    or ".join(
        f'label_replace(vector({w}), "within", "{duration(w)}", "", "")'
        for w in pattern_windows_s(config))
    return expr(
        """
        min by ${g} (
            (last_over_time(${peak}[${hold}]) >= on ${g} group_left () ${limit}) * 0
          + on (within) group_left ()
            (
                ${lengths}
            )
        )""",
        g=g, peak=q.PATTERN_PEAK, hold=duration(config.lasting_hold_s), limit=q.LIMIT,
        lengths=lengths)


def _climb_beyond_pattern(config: Config) -> str:
    """1 where a climb goes beyond what the recurring peaks and their lasting trend
    explain (a sawtooth's tooth, a daily swing's climb or a nightly batch back at
    yesterday's level is not): where the pattern is known, above the envelope by a
    margin plus a day of the lasting trend, or by ``fill_beyond_trend_s`` of it while
    the lasting horizon reaches the limit within the envelope window and the floor rises
    (a leak: the peaks of a batch that grows over a flat floor rise a day of the trend
    a day, and its climb is the pattern), or above it at all
    where the last hour rose above its daily pattern by more than that trend explains
    (``ABOVE_PATTERN``: the leak speeds up, the day's average lags); where it is not
    (the figure has only climbed since it appeared), above the unknown-pattern ratio of
    the limit."""
    g = by(*config.group_labels)
    hold = duration(config.lasting_hold_s)
    env = f"last_over_time({q.PATTERN_CEILING}[{hold}])"
    rate = f'last_over_time({q.GROWTH}{{horizon="lasting"}}[{hold}])'
    return expr(
        """
        (
            (
                ${u} > on ${g} (${env} + on ${g} ${bw} * ${rate} or ${env})
              or
                ${u} > on ${g} (${env} + on ${g} ${beyond} * ${rate})
                and on ${g}
                ${ttl}{horizon="lasting"} < ${bw}
                and on ${g}
                last_over_time(${floor_rise}[${hold}]) > on ${g} ${minimum}
              or
                ${u} > on ${g} ${env}
                and on ${g}
                ${above}
            )
            and on ${g} ${known}
          or
            ${u} > on ${g} ${unknown} * ${limit}
            unless on ${g} ${known}
        ) * 0 + 1
        """,
        u=q.UNRECLAIMABLE, g=g, env=env, bw=config.baseline_window_s, rate=rate,
        beyond=config.fill_beyond_trend_s, ttl=q.TIME_TO_LIMIT_BY_HORIZON,
        floor_rise=q.UNRECLAIMABLE_BASELINE_RISE, hold=hold,
        minimum=min_rise(config),
        known=f"last_over_time({q.PATTERN_KNOWN}[{hold}])",
        above=f"last_over_time({q.ABOVE_PATTERN}[{hold}])",
        unknown=config.fill_unknown_pattern_ratio, limit=q.LIMIT)


def fast_recording_rules(config: Config) -> list[Rule]:
    """Evaluated every evaluation interval: the figures, the binding cgroup, the short
    and medium horizons and the time to limit."""
    g = config.group_labels
    gb = by(*g)
    pod = by(*config.pod_labels)
    kv = (*g, "model_name", "engine")
    hold_lasting = duration(config.lasting_hold_s)

    def beyond_noise(share: float) -> str:
        # A share of the quiet hours' swing; nothing before an hour's noise is known.
        return expr("on ${g} (${share} * last_over_time(${quiet}[${hold}]) or on ${g} ${u} * 0)",
                    g=gb, share=share, quiet=q.QUIET_SWING, hold=hold_lasting,
                    u=q.UNRECLAIMABLE)

    # Each horizon counts only while the figure still makes new highs beyond its noise:
    # the short one, now against the minutes before its lag; the medium one, the last
    # window's highest against the window before's.
    climbing_short = expr(
        "${u} > max_over_time(${u}[${w}] offset ${lag}) + ${noise}",
        u=q.UNRECLAIMABLE, w=duration(config.short_window_s),
        lag=duration(config.climbing_lag_s), noise=beyond_noise(config.climbing_noise_share))
    climbing_medium = expr(
        "max_over_time(${u}[${w}]) > max_over_time(${u}[${w}] offset ${w}) + ${noise}",
        u=q.UNRECLAIMABLE, w=duration(config.medium_climbing_window_s),
        noise=beyond_noise(config.medium_climbing_noise_share))

    def growth(slope: str, sustain_s: int, window_s: int, climbing: str) -> str:
        # The slowest slope over the sustain window, once the series spans both.
        return expr(
            """
            min_over_time(${slope}[${s}]) > 0
              and
            ${spans}
              and
            ${climbing}
            """,
            slope=slope, s=duration(sustain_s),
            spans=spans(q.UNRECLAIMABLE, window_s + sustain_s, 5 * 60), climbing=climbing,
        )

    tol = expr("clamp_min(${r} * ${limit}{container=\"\"}, ${b})",
               r=config.owner_tolerance_ratio, limit=q.LIMIT, b=config.owner_tolerance_bytes)
    envelope = f"last_over_time({q.PEAK_ENVELOPE}[{hold_lasting}])"
    lasting_rate = f'last_over_time({q.GROWTH}{{horizon="lasting"}}[{hold_lasting}])'
    # What is left above the higher of the envelope and the recent peak: the headroom
    # above the envelope where it is the lower one, else the recorded peak headroom;
    # only where lasting growth is seen (the time to limit and the page's band read it).
    lasting_headroom = expr(
        "(clamp_min(${limit} - ${env}, 0) < ${peak_headroom} or ${peak_headroom})"
        "\nand on ${g}\n${rate}",
        limit=q.LIMIT, env=envelope, peak_headroom=q.PEAK_HEADROOM, g=gb, rate=lasting_rate)
    rules_: list[tuple[str, str]] = [
        # A limit of 0 (outside the contract) must not divide: it is dropped.
        (q.LIMIT, held(config, c.MEMORY_LIMIT_BYTES, g) + " > 0"),
        (q.UNRECLAIMABLE, held(config, c.MEMORY_UNRECLAIMABLE_BYTES, g)),
        (q.WORKING_SET, held(config, c.MEMORY_WORKING_SET_BYTES, g)),
        (q.UNRECLAIMABLE_RATIO, f"{q.UNRECLAIMABLE} / {q.LIMIT}"),
        (q.HEADROOM, f"clamp_min({q.LIMIT} - {q.UNRECLAIMABLE}, 0)"),
        (q.PEAK_HEADROOM, expr(
            "clamp_min(${limit} - max_over_time(${u}[${w}]), 0)",
            limit=q.LIMIT, u=q.UNRECLAIMABLE, w=duration(config.peak_window_s))),
        (q.LASTING_HEADROOM, lasting_headroom),
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
                                      config.short_window_s, climbing_short)),
        (q.GROWTH + "\tmedium", growth(q.SLOPE_MEDIUM, config.medium_sustain_s,
                                       config.medium_window_s, climbing_medium)),
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
                  ${lasting_headroom}
                / on ${g} group_right ()
                  last_over_time(${growth}{horizon="lasting"}[${hold}])
                or
                  label_replace(label_replace(${pattern}, "horizon", "lasting", "", ""),
                                "from", "pattern", "", "")
              )
            """,
            peak_headroom=q.PEAK_HEADROOM, g=gb, gh=by(*g, "horizon"), growth=q.GROWTH,
            lasting_headroom=q.LASTING_HEADROOM, hold=hold_lasting,
            pattern=indent(_pattern_ttl(config), 18))),
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
        # What the page reads of the peaks (recorded once for its fire and clear levels):
        # their own forecast (where the lasting horizon sees growth), and how close they
        # came to the limit in units of the memory's noise (wherever it has noise: a pod
        # whose peaks sit within it is killed by its next excursion, growing or not).
        # The envelope carried on by the trend since each of its peaks (PEAK_CARRIED):
        # peaks that rise with a leak (bursts, teeth of irregular height) whose tallest
        # came hours ago held a still figure's forecast and paged late or never.
        (q.ENVELOPE_TIME_TO_LIMIT, expr(
            "clamp_min(${limit} - ${carried}, 0) / on ${g} ${rate}",
            limit=q.LIMIT, carried=f"last_over_time({q.PEAK_CARRIED}[{hold_lasting}])",
            g=gb, rate=lasting_rate)),
        (q.PEAK_HEADROOM_SWINGS, expr(
            """
              clamp_min(${limit} - last_over_time(${level}[${hold}]), 0)
            / on ${g}
              (last_over_time(${quiet}[${hold}]) > 0)
            """,
            limit=q.LIMIT, level=q.PEAK_LEVEL, g=gb, quiet=q.QUIET_SWING, hold=hold_lasting)),
        # Where the daily pattern decides when the next peak comes (the page's hold,
        # alerts/memory.py held_below): every window ahead against the limit at once.
        (q.PATTERN_CLEAR, expr(
            """
            (
                last_over_time(${peak}[${hold}])
                  < on ${g} group_left ()
                ${below} * ${limit}
              and on ${g}
                last_over_time(${holds}[${hold}])
            ) * 0 + 1
            """,
            peak=q.PATTERN_PEAK, hold=hold_lasting, g=gb, limit=q.LIMIT,
            below=number(1 - config.fill_beyond_peaks_ratio), holds=q.PATTERN_HOLDS)),
        (q.TMPFS_USED, held(config, c.TMPFS_USED_BYTES, (*g, "mount"))),
        (q.TMPFS_SIZE, held(config, c.TMPFS_SIZE_BYTES, (*g, "mount")) + " > 0"),
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
            cap=held(config, c.VLLM_KV_CACHE_CAPACITY_BYTES, kv, medium=c.MEDIUM_CPU),
            usage=held(config, c.VLLM_KV_CACHE_USAGE_RATIO, kv, medium=c.MEDIUM_CPU))),
        (q.NODE_AVAILABLE, held(config, c.NODE_MEMORY_AVAILABLE_BYTES, config.node_labels)),
        (q.VLLM_UP, expr(
            "max by ${g} (avg_over_time(${up}[${w}]))",
            g=gb, up=exported(config, c.VLLM_UP), w=duration(config.vllm_scrape_window_s))),
    ]
    return recording_rules(rules_, q.FAST_RECORDING_RULE_HELP)
