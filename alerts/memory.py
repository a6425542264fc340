"""The cgroup memory alerts: HeadroomMemoryFillingUp (ticket and page), NearLimit,
ReclaimAtLimit and HiddenMemoryGrowth. Each fires on the binding cgroup only.
"""

from __future__ import annotations

from exporter import catalog as c
from exporter import promql as q
from exporter.promql import Config, by, duration, expr, number

from .build import (
    WHERE,
    Rule,
    alerting_rule,
    binding,
    binding_clause,
    exported,
    hysteresis,
    indent,
    min_time_to_limit,
    workload_query,
)
from .forecast import pattern_windows_s


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
        "+{{ .Value | humanize1024 }}B/day{{ else }}no process or kind recorded{{ end }}"
        f'{{{{ range printf "{q.KIND_GROWTH}{{{pod_m},container=\\"\\",'
        f'kind=\\"{q.KIND_DEV_SHM}\\"}}'
        f' * 86400" {pod_args} | query }}}}; /dev/shm '
        "{{ if gt .Value 1048576.0 }}+{{ .Value | humanize1024 }}B/day{{ else }}flat"
        "{{ end }}{{ end }}"
    )


def _ttl_query(config: Config) -> str:
    """Go template pipeline: the alert's TIME_TO_LIMIT series."""
    matchers = ",".join(f"{x}=%q" for x in config.group_labels)
    args = " ".join(f"$labels.{x}" for x in config.group_labels)
    return f'printf "{q.TIME_TO_LIMIT}{{{matchers}}}" {args} | query'


def _ttl_text(config: Config) -> str:
    """Go template: the time to limit and the horizon that binds (none: the noise
    band pages a pod no horizon times)."""
    return (
        f"{{{{ range {_ttl_query(config)} }}}}"
        "{{ .Value | humanizeDuration }} (the {{ .Labels.horizon }} horizon binds)"
        "{{ else }}no time a trend gives: its next excursion decides{{ end }}"
    )


def filling_up_warning(config: Config) -> Rule:
    def cond(h_s: int) -> str:
        return f"{min_time_to_limit(config, 'lasting')} < {h_s}"

    name = "HeadroomMemoryFillingUp"
    clear_s, hold = config.fill_warning_clear_horizon_s, duration(config.fill_warning_clear_hold_s)
    g = by(*config.group_labels)
    # The clear level, or a reading below it within the hold unless the limit rose since
    # (readings before a cut had more headroom: they cannot hold it on) or the floor
    # fell (FALLEN_FLOOR: a leak fixed in place): a new forecast, not a wobble.
    held = (f'min by {g} (min_over_time({q.TIME_TO_LIMIT_BY_HORIZON}{{horizon="lasting"}}'
            f'[{hold}])) < {clear_s}\nunless on {g}\n'
            f'({q.LIMIT} > min_over_time({q.LIMIT}[{hold}]) or {q.FALLEN_FLOOR})')
    condition = hysteresis(config, name, "warning", binding(config, cond(
        config.fill_warning_horizon_s)), binding(config, f"(\n  {cond(clear_s)}\nor\n  "
                                                         f"{indent(held, 2)}\n)"))
    return alerting_rule(
        config, name, condition, "warning", config.fill_warning_for_s,
        f"{{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} is predicted to reach its "
        f"memory limit within {duration(config.fill_warning_horizon_s)}.",
        f"The lasting trend of {WHERE} (the floor and the peaks both rise, day over day) "
        f"reaches the {workload_query(config, q.LIMIT, 'humanize1024')}B limit in "
        f"{{{{ $value | humanizeDuration }}}}. What grows: {_top_grower(config)}. The "
        f"peaks reached {workload_query(config, q.PEAK_ENVELOPE, 'humanize1024')}B; the "
        f"working set may look flat while page cache is squeezed out.",
    )


def held_below(config: Config, scale: float, horizon_s: int, where: str = "") -> str:
    """`` unless ...``: where the daily pattern holds (``PATTERN_HOLDS``) and its peak
    over the hours ahead stays below the limit in force now by the peaks' margin, the
    lasting horizon's straight lines (the envelope at the lasting rate) neither start
    the page nor keep it on. They say when the peaks reach the limit; the pattern says
    when the next peak comes: a fast leak under a daily swing crests near the limit
    half a day before the climb that kills.

    Fire level (``scale`` 1): the first pattern window that covers ``horizon_s`` (none:
    nothing is held). Clear level: the longest window (6 h, about the clear levels'
    horizons): a page that started at a crest ends once the pattern's next hours are
    clear of the limit (the envelope holds that crest for a day), and pages again when
    they are not. The clear window covers the fire window, so the pattern alone cannot
    flap a page. ``where``: only where that series is."""
    windows = pattern_windows_s(config)
    covering = [w for w in windows if w >= horizon_s]
    if scale == 1 and not covering:
        return ""
    window = covering[0] if scale == 1 else max(windows)
    g = by(*config.group_labels)
    clear = f'{q.PATTERN_CLEAR}{{within="{duration(window)}"}}'
    if where:
        clear = f"{where}\nand on {g}\n{clear}"
    return "\n  unless on " + g + "\n" + indent(f"({clear}\n)", 4)


def _time_to_noise_band(config: Config, scale: float) -> str:
    """Seconds until the figure is within the page's noise band of the limit, per
    cgroup: the recorded time to limit less the band (``fill_noise_band_swings`` of the
    quiet swing, times ``scale``) at the rate the time to limit implies: its headroom
    over it. There the noise band pages (below); this is its forecast, so a climb that
    slows as it nears the limit (a cache filling toward a level past it) pages the page
    horizon before it gets there, not when its own slowing trend would reach the limit.
    Short and medium: the recent peak's headroom at the horizon's rate. Lasting:
    ``LASTING_HEADROOM`` (above the envelope or the recent peak) over its time to limit,
    which is its lasting rate where the envelope binds and more where the daily pattern
    reaches the limit sooner (the pattern's hours ahead are no rate: the lasting rate
    there, lagging a young leak, put the band a day away and paged on a pattern 6 h
    ahead). Without a quiet swing yet, or at the limit already: the time to limit."""
    g = config.group_labels
    gb = by(*g)
    hold = duration(config.lasting_hold_s)
    return expr(
        """
        min by ${g} (
            ${ttl}
          - on ${gh}
            (
                last_over_time(${quiet}[${hold}]) * ${band}
              / on ${g} group_right ()
                (
                    ${growth}{horizon=~"short|medium"}
                  or
                    ${lasting_headroom}
                  / on ${g} group_right ()
                    (${ttl}{horizon="lasting"} > 0)
                )
            )
          or
            ${ttl}
        )""",
        g=gb, gh=by(*g, "horizon"), ttl=q.TIME_TO_LIMIT, quiet=q.QUIET_SWING, hold=hold,
        band=number(config.fill_noise_band_swings * scale), growth=q.GROWTH,
        lasting_headroom=q.LASTING_HEADROOM)


def critical_condition(config: Config, scale: float) -> str:
    """The page's condition with every horizon times ``scale`` (1: fire; more: clear).

    * the time until the figure is within the noise band of the limit (the recorded
      time to limit less the band's share of the quiet swing at that horizon's rate:
      ``_time_to_noise_band``) within the critical horizon: a short or medium climb that
      goes beyond the pattern (``CLIMB_BEYOND_PATTERN``), or the lasting horizon (the
      peaks' envelope, the daily pattern); the lasting horizon within the pattern page
      horizon (its windows ahead are whole hours);
    * the peaks at the limit: their envelope reaches it at the lasting rate within the
      lasting page horizon, or within the confirm horizon while a climb that reaches it
      within the fast confirm horizon goes on (a sawtooth whose teeth climb);
    * the peaks within the noise of the limit (``QUIET_SWING``), with or without a
      time to limit: the next excursion like those of the quiet hours kills, and no
      trend can time it (a young pod filling ever slower toward a level past its limit
      has no horizon that holds, and sits in this band for its last hour).
    """
    g = by(*config.group_labels)

    def h(seconds: int) -> str:
        return number(round(seconds * scale))

    # Each term but the last reads a recorded series that exists only where something
    # grows: the page's fire and clear levels cost a few joins over those, not over
    # every cgroup; the noise band is one read of a series of every noisy cgroup.
    return expr(
        """
            min by ${g} (${ttl})
          and on ${g}
            (
                ${to_band} < ${crit}${lasting_crit_held}
              or
                ${lasting} <= ${pattern_page}${pattern_page_held}
              or
                ${env_ttl} < ${lasting_page}${lasting_page_held}
              or
                ${env_ttl} < on ${g} (${teeth_confirm} or on ${g} ${env_ttl} * 0 + ${confirm})
                and on ${g}
                ${fast} < ${fast_confirm}
            )
        or
            ${swings} < ${band}${band_held}
        """,
        g=g, ttl=q.TIME_TO_LIMIT, fast=min_time_to_limit(config, "short|medium"),
        to_band=indent(_time_to_noise_band(config, scale), 16).lstrip(),
        lasting=min_time_to_limit(config, "lasting"),
        # The peaks' own forecast: from the envelope of the peaks before the last hour,
        # not from a tooth climbing now (a sawtooth's tooth above the last peaks is
        # released; the next tooth is what the envelope's trend says).
        env_ttl=q.ENVELOPE_TIME_TO_LIMIT,
        swings=q.PEAK_HEADROOM_SWINGS, band=number(config.fill_noise_band_swings * scale),
        # The noise band's peaks are the envelope's too: a page it keeps on clears with
        # the lasting terms. It starts the page as before (a flat leak's pattern peak is
        # its envelope).
        band_held=held_below(config, scale, 0) if scale != 1 else "",
        # The page must be out (its `for:` elapsed) when the kill is the horizon away.
        crit=h(config.fill_critical_horizon_s + config.fill_critical_for_s),
        lasting_crit_held=held_below(
            config, scale, config.fill_critical_horizon_s + config.fill_critical_for_s,
            f'{q.TIME_TO_LIMIT}{{horizon="lasting"}}'),
        pattern_page_held=held_below(config, scale, config.fill_pattern_page_horizon_s),
        lasting_page_held=held_below(config, scale, config.fill_lasting_page_horizon_s),
        pattern_page=h(config.fill_pattern_page_horizon_s),
        lasting_page=h(config.fill_lasting_page_horizon_s),
        confirm=h(config.fill_lasting_confirm_horizon_s),
        # With teeth, the peaks cross on the tooth whose crest their trend puts past the
        # limit: the envelope that many periods from it, not the confirm horizon (6 h,
        # two teeth of 3 h: the page came on the tooth two before the one that kills).
        teeth_confirm=(f"clamp_max(last_over_time({q.TEETH_PERIOD}"
                       f"[{duration(config.lasting_hold_s)}]), "
                       f"{config.fill_lasting_confirm_horizon_s})"
                       + ("" if scale == 1 else f" * {number(scale)}")),
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


def _noise_band_query(config: Config, below: float) -> str:
    """Go template pipeline: the alert's PEAK_HEADROOM_SWINGS below ``below``."""
    matchers = ",".join(f"{x}=%q" for x in config.group_labels)
    args = " ".join(f"$labels.{x}" for x in config.group_labels)
    return f'printf "{q.PEAK_HEADROOM_SWINGS}{{{matchers}}} < {number(below)}" {args} | query'


def filling_up_critical(config: Config) -> Rule:
    name = "HeadroomMemoryFillingUp"
    clear = config.fill_critical_clear_horizon_s / config.fill_critical_horizon_s
    condition = hysteresis(config, name, "critical", critical_condition(config, 1),
                           critical_condition(config, clear) + "\nor\n"
                           + _crash_loop_hold(config), then=binding_clause(config))
    band = config.fill_noise_band_swings
    # Paged by the noise band, the time to limit is the trend's (hours), or there is
    # none (kept on by the band's clear level, the value is the band's): the summary
    # says what pages instead, the peaks within the memory's own noise of the limit.
    no_ttl = f"not ({_ttl_query(config)})"
    return alerting_rule(
        config, name, condition, "critical", config.fill_critical_for_s,
        f"{{{{ if or ({_noise_band_query(config, band)}) (and ({no_ttl}) "
        f"({_noise_band_query(config, clear * band)})) }}}}"
        "{{ $labels.namespace }}/{{ $labels.pod }} is within the noise of its memory "
        "limit: one more swing like its quiet hours' OOM-kills it."
        "{{ else }}{{ $labels.namespace }}/{{ $labels.pod }} will be OOM-killed in about "
        "{{ $value | humanizeDuration }}.{{ end }}",
        f"Unreclaimable memory of {WHERE} reaches the "
        f"{workload_query(config, q.LIMIT, 'humanize1024')}B limit in "
        f"{_ttl_text(config)}; "
        f"{workload_query(config, q.HEADROOM, 'humanize1024')}B are left "
        f"({workload_query(config, q.UNRECLAIMABLE_RATIO, 'humanizePercentage')} used). "
        f"{{{{ range {_noise_band_query(config, clear * band)} }}}}Its peaks are "
        "{{ printf \"%.2f\" .Value }} of its quiet hours' swings below the limit "
        f"(it pages below {number(band)}). {{{{ end }}}}"
        f"What grows: {_top_grower(config)}. Act now: the kernel OOM-kills the pod when "
        f"it gets there.",
    )


def near_limit(config: Config) -> Rule:
    # A workload that grows (at any horizon within the last envelope window) is
    # FillingUp's: a slow leak in a big limit sits above 95 % for days before its kill.
    # This pages a pod that sits at its limit without growing.
    name = "HeadroomMemoryNearLimit"
    g = by(*config.group_labels)
    # ...and only when what is left (below the recent peak) is within the memory's own
    # swing of the last hour, or under a floor: that swing, come again, is the kill.
    def cond(ratio: float, swings: float) -> str:
        return expr(
            """
            ${ratio} > ${threshold}
            and on ${g}
            ${peak_headroom}
              < on ${g}
            ${k} * (last_over_time(${range}[${hold}]) > on ${g} ${floor} * ${limit}
                    or on ${g} ${floor} * ${limit})
            """,
            ratio=q.UNRECLAIMABLE_RATIO, threshold=ratio, g=g,
            limit=q.LIMIT, peak_headroom=q.PEAK_HEADROOM, k=swings,
            range=q.HOURLY_RANGE, hold=duration(config.lasting_hold_s),
            floor=config.near_limit_min_headroom_ratio,
        )

    # Growth now, or recorded as seen by the lasting group within the envelope window
    # (GREW_LATELY: reading a day of every growth series each minute, then a day of
    # GREW, was this alert's cost).
    not_growing = expr(
        """
        unless on ${g} ${growth}
        unless on ${g} last_over_time(${grew}[${hold}])
        ${binding}
        """,
        g=g, growth=q.GROWTH, grew=q.GREW_LATELY, hold=duration(config.lasting_hold_s),
        binding=binding_clause(config))
    condition = hysteresis(config, name, "critical", cond(config.near_limit_ratio, 1),
                           cond(config.near_limit_clear_ratio, 2), then=not_growing)
    return alerting_rule(
        config, name, condition, "critical",
        config.near_limit_for_s,
        "{{ $labels.namespace }}/{{ $labels.pod }} has almost no reclaimable memory left.",
        f"Memory the kernel cannot reclaim is at {{{{ $value | humanizePercentage }}}} of "
        f"the {workload_query(config, q.LIMIT, 'humanize1024')}B limit of {WHERE}; the "
        f"next allocation that does not fit triggers the OOM killer.",
    )


def reclaim_at_limit(config: Config) -> Rule:
    # max, not sum, over instances: two exporters overlapping in a rollout see one counter.
    name = "HeadroomMemoryReclaimAtLimit"
    g = by(*config.group_labels)

    def cond(ratio: float) -> str:
        return f"{q.UNRECLAIMABLE_RATIO} > {ratio}"

    # The reclaim counter's rate is read once for fire and clear.
    reclaiming = expr(
        """
        and on ${g}
        max by ${g} (rate(${events}[${w}])) > 0
        ${binding}
        """,
        g=g, events=exported(config, c.MEMORY_EVENTS_TOTAL, event=c.EVENT_MAX),
        w=duration(config.reclaim_window_s), binding=binding_clause(config))
    condition = hysteresis(config, name, "warning", cond(config.high_ratio),
                           cond(config.high_clear_ratio), then=reclaiming)
    return alerting_rule(
        config, name, condition, "warning",
        config.reclaim_for_s,
        "The kernel keeps reclaiming memory at the limit of "
        "{{ $labels.namespace }}/{{ $labels.pod }}.",
        f"{WHERE} keeps hitting its memory limit (memory.events max / memory.failcnt "
        f"rising) while {{{{ $value | humanizePercentage }}}} of the limit cannot be "
        f"reclaimed: the kernel is squeezing the last page cache out, and an OOM kill "
        f"follows if it grows further.",
    )


def hidden_memory_growth(config: Config) -> Rule:
    name = "HeadroomHiddenMemoryGrowth"

    # Above both floors: the rise is read once per level, against the larger.
    def cond(part: float) -> str:
        return expr(
            "${rise}${pod_level} > on ${g}"
            " clamp_min(${min_ratio} * ${limit}${pod_level}, ${min_bytes})",
            pod_level='{container=""}',
            rise=q.HIDDEN_BASELINE_RISE, g=by(*config.group_labels),
            min_bytes=number(part * config.hidden_min_rise_bytes),
            min_ratio=number(part * config.hidden_min_rise_ratio), limit=q.LIMIT,
        )

    condition = hysteresis(config, name, "warning", cond(1.0), cond(0.5))
    return alerting_rule(
        config, name, condition, "warning", config.hidden_for_s,
        "Memory no process accounts for grows in {{ $labels.namespace }}/"
        "{{ $labels.pod }}.",
        f"The baseline of memory that no process of pod {{{{ $labels.namespace }}}}/"
        f"{{{{ $labels.pod }}}} maps rose by {{{{ $value | humanize1024 }}}}B over "
        f"{duration(config.baseline_window_s)} (now "
        f"{workload_query(config, q.HIDDEN, 'humanize1024')}B). It is shmem no process "
        f"maps (files in /dev/shm or a memory-backed emptyDir), kernel memory, or "
        f"charges left by a killed container: no process RSS shows it.",
    )
