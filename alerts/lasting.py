"""The lasting recording group: the breakdown per kind and per process, hourly minima and
maxima, the floor and the envelope of the peaks, the pattern and its ceiling, the
lasting horizon, the top grower and the /dev/shm trend.

Evaluated every ``lasting_interval_s``; no rule here reads a day of raw samples.
"""

from __future__ import annotations

from typing import Any

from exporter import catalog as c
from exporter import promql as q
from exporter.promql import Config, by, duration, expr, number, one_of, selector, series

from .build import Rule, counted, exported, held, indent, recording_rules, spans
from .forecast import min_rise, pattern_windows_s

# The kinds whose growth a process accounts for: what grows there has a process to name.
PROCESS_KINDS: tuple[str, ...] = (c.KIND_ANON, c.KIND_SHMEM)
# The kinds MEMORY_KIND records: the kinds of headroom_memory_bytes the kernel cannot
# reclaim (the residual aside), socket buffers folded into kernel.
RECORDED_KINDS: tuple[str, ...] = (c.KIND_ANON, c.KIND_SHMEM, c.KIND_KERNEL)


def _ramp_growth(config: Config) -> str:
    """A period of a ramping rise's own growth (PATTERN_RISE's): the faster of the ramp
    window's two halves (the rise now less the rise half the window ago, that less the
    rise the window ago), scaled from half the window to a period. None where a rise
    is missing (a gap)."""
    g = by(*config.group_labels)
    half = config.pattern_ramp_s // 2

    def rise(offset: int) -> str:
        at = f" offset {duration(offset)}" if offset else ""
        return f"last_over_time({q.PATTERN_RISE}[{duration(config.lasting_hold_s)}]{at})"

    # max(late, early) as early + clamp_min(late - early, 0), each rise read once:
    # late - early is now - 2 * middle + then.
    return expr(
        "(${middle} - on ${g} ${then} + on ${g} clamp_min(${now} - on ${g} 2 * ${middle}"
        " + on ${g} ${then}, 0)) * ${period} / ${half}",
        now=rise(0), middle=rise(half), then=rise(config.pattern_ramp_s), g=g,
        period=config.pattern_period_s, half=half)


def _tooth_spread(config: Config) -> str:
    """``TOOTH_SPREAD``: the range of the envelope window's falls over their number less
    one (the window over the teeth's mean period, less one). For n heights spread
    evenly between two bounds, the tallest seen falls short of the upper one by that on
    average: a sawtooth of equal teeth has none, irregular ones a share of their range."""
    g = by(*config.group_labels)
    falls = f"{q.RELEASE_FALL}[{duration(config.baseline_window_s)}]"
    return expr(
        "(max_over_time(${falls}) - min_over_time(${falls}))"
        " * on ${g} ${period} / on ${g} (${bw_s} - ${period})",
        falls=falls, g=g, period=q.TEETH_PERIOD, bw_s=config.baseline_window_s)


def _tooth_crest(config: Config) -> str:
    """How high the tooth now climbing is expected to go at most (``TOOTH_CREST``),
    where the pattern has teeth: the last release's base plus the tallest tooth the
    pattern makes (the tallest fall of the envelope window and TOOTH_SPREAD). No trend
    is added: the forecasts that read it carry it on by the lasting trend themselves
    (ENVELOPE_TIME_TO_LIMIT; the climb beyond the pattern, above the ceiling)."""
    g = by(*config.group_labels)
    bw = duration(config.baseline_window_s)
    return expr(
        "last_over_time(${base}[${bw}]) + on ${g} max_over_time(${fall}[${bw}])"
        " + on ${g} ${spread}",
        base=q.RELEASE_BASE, bw=bw, g=g, fall=q.RELEASE_FALL, spread=q.TOOTH_SPREAD)


def floor_memory_hold(config: Config) -> str:
    """How far back the hourly floor-memory figures are read: two of its rounds and a
    lasting hold, so one is always in the window."""
    return duration(2 * config.floor_memory_interval_s + config.lasting_hold_s)


def _pattern_ceiling(config: Config) -> str:
    """The envelope of the peaks plus the margin a recurring climb stays within
    (``PATTERN_CEILING``): recorded here, with the figures it is made of, and read
    twice a minute by ``alerts.forecast``'s climb beyond the pattern."""
    g = by(*config.group_labels)
    hold = duration(config.lasting_hold_s)
    envelope = q.PEAK_ENVELOPE
    margin = f"{config.fill_beyond_peaks_ratio} * {q.LIMIT}"
    # A share of the teeth's height where that is more than the margin and the floor is
    # known not to rise or the pattern has teeth: the envelope over the floor, less the
    # window's lasting trend. Over a rising floor without teeth (a leak under a daily
    # swing, whose troughs are releases too) a climb above the envelope is the leak's
    # until it is more than the margin beyond; a sawtooth's flushes over a leak are
    # still teeth of irregular height.
    teeth = expr(
        "(${share} * (${env} - on ${g} ${floor} - on ${g} ${bw} * ${trend} or ${env} - on ${g}"
        " ${floor}) > on ${g} ${margin} and on ${g} (${rise} <= on ${g} ${minimum}"
        " or on ${g} ${has_teeth}) or on ${g} ${margin})",
        share=config.fill_beyond_teeth_share, env=envelope, g=g,
        floor=q.UNRECLAIMABLE_BASELINE, margin=margin, bw=config.baseline_window_s,
        rise=f"last_over_time({q.UNRECLAIMABLE_BASELINE_RISE}[{hold}])",
        minimum=min_rise(config), has_teeth=q.TEETH,
        trend=f'clamp_min(last_over_time({q.GROWTH}{{horizon="lasting"}}'
              f'[{hold}]), 0)')
    # After a release a climb above the peaks is the next tooth while it stays within
    # the larger of the margin and a share of the teeth's height (teeth vary), plus the
    # envelope's own rise over the release window: the teeth of a leaking sawtooth
    # climb that much before the lasting trend exists. Once the trend exists, no more
    # than a release window of it: the envelope lags the figure by an hour, so a climb
    # that never stops (a leak out of a daily swing) has its own last hours for a rise
    # and would always be within it. Without a release,
    # the margin counts against peaks that recur, not against a climb's own last hours:
    # where the envelope is no higher than the hour before the last one reached, it is
    # the climb itself (a steady leak, even a noisy one), and there is no margin.
    env_before = (f"last_over_time({q.PEAK_ENVELOPE}[{hold}] "
                  f"offset {duration(config.release_window_s)})")
    env_rise = expr(
        "clamp_min(${env} - on ${g} ${env_before}, 0) < on ${g} ${window} * ${trend}"
        " or on ${g} ${window} * ${trend} or on ${g} clamp_min(${env} - on ${g}"
        " ${env_before}, 0)",
        env=envelope, g=g, window=config.release_window_s, env_before=env_before,
        trend=f'clamp_min(last_over_time({q.GROWTH}{{horizon="lasting"}}[{hold}]), 0)')
    env = expr(
        """
        ${env}
        + on ${g}
        (
            (
                ${teeth} + on ${g} (${env_rise})
              or on ${g}
                ${teeth}
            )
            and on ${g} ${released}
          or on ${g}
            ${margin}
            unless on ${g}
            ${env} <= on ${g} max_over_time(${hmax}[${hold}] offset ${hw})
          or on ${g}
            ${limit} * 0
        )""",
        env=envelope, g=g, margin=margin, teeth=teeth, released=q.RELEASED, hold=hold,
        env_rise=env_rise, hmax=q.HOURLY_MAX, hw=duration(config.hourly_window_s),
        limit=q.LIMIT)
    # Where the pattern has teeth, up to the tooth's expected crest and
    # teeth_beyond_spreads of their spread where that is higher: a climb within it is a
    # tooth nine times in ten (four in five with three or four teeth a day), however it
    # compares with the day's tallest peak (a young leak's trend under-reads the floor's
    # rise: a tall tooth on a risen floor is still a tooth, and the envelope carried on
    # does not say so).
    crest = f"{q.TOOTH_CREST} + on {g} {config.teeth_beyond_spreads} * {q.TOOTH_SPREAD}"
    # Where last week's peaks (HIGHEST_ENVELOPE) stood above the day's before this climb
    # (the envelope a release window ago), after a weekend or a quiet day, the peaks
    # that recur are last week's: a climb back to them is the pattern, a climb beyond
    # them by the margin is not, however high the day's envelope and its margins ride
    # the climb itself (a leak under a weekly pattern, killed on a Monday morning, was
    # never beyond a ceiling of Sunday's envelope plus a share of the weekend's drop and
    # the envelope's own rise).
    week = f"last_over_time({q.HIGHEST_ENVELOPE}[{floor_memory_hold(config)}])"
    return expr(
        """
        max by ${g} (
            label_replace(${crest}, "part", "crest", "", "")
          or
            min by ${g} (
                label_replace(
                    ${env},
                    "part", "day", "", ""
                )
              or
                label_replace(
                    ${week} + on ${g} ${margin}
                    and on ${g} ${week} > on ${g} ${day_before},
                    "part", "week", "", ""
                )
            )
        )""",
        crest=crest, g=g, env=indent(env, 12), week=week, margin=margin,
        day_before=env_before)


def breakdown_rules(config: Config) -> list[tuple[str, str]]:
    """What the memory is made of, per kind and per process, and what no process accounts
    for: the top grower's inputs, first in the lasting group. Recorded every lasting
    interval, not every minute: they are the costliest figures per cgroup (a series per
    kind and per process) and only hour-long slopes and day-over-day means read them."""
    g = config.group_labels
    gb = by(*g)
    pod = by(*config.pod_labels)

    def per_process(pss_kind: str, rss_kind: str) -> str:
        # PSS where the exporter read it (it splits shared pages), else RSS.
        return expr(
            "(\n  ${pss}\nor\n  ${rss}\n)",
            pss=held(config, c.PROCESS_MEMORY_PSS_BYTES, (*g, "process"), kind=pss_kind),
            rss=held(config, c.PROCESS_MEMORY_BYTES, (*g, "process"), kind=rss_kind),
        )

    return [
        (q.PROCESS_MEMORY, expr(
            "${anon}\n+\n${shm}\nor\n${anon}",
            anon=per_process(c.PSS_ANON, c.RSS_ANON), shm=per_process(c.PSS_SHMEM, c.RSS_SHMEM))),
        (q.PROCESS_ATTRIBUTED, f"sum by {gb} ({q.PROCESS_MEMORY})"),
        # kernel with the socket buffers folded in, as every reader wants it: the
        # growth rules then read one kernel series per cgroup, not two to sum.
        (q.MEMORY_KIND, expr(
            """
                max by ${gk} (last_over_time(${own}[${hold}]))
            or
                label_replace(sum by ${g} (max by ${gk} (last_over_time(${kernel}[${hold}]))),
                              "kind", "${kernel_kind}", "", "")
            """,
            gk=by(*g, "kind"), g=gb, hold=duration(config.hold_s),
            own=series(c.MEMORY_BYTES, config.selector, one_of("kind", *PROCESS_KINDS)),
            kernel=series(c.MEMORY_BYTES, config.selector,
                          one_of("kind", c.KIND_KERNEL, c.KIND_SOCK)),
            kernel_kind=c.KIND_KERNEL)),
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
    ]


def _per_kind(config: Config, of: Any) -> str:
    """A growth per kind, ``of`` applied to each series it reads: anon, shmem and kernel
    (socket buffers folded in) as MEMORY_KIND records them; the pod's memory-backed
    tmpfs as "dev_shm"; memory no process accounts for as "hidden". A file in /dev/shm
    no process maps grows shmem, dev_shm and hidden at one rate: dev_shm, the name that
    says where to look, is lifted by 0.1 ppm to win topk's tie
    (``exporter.oncall.forecast.GROWER_KINDS`` orders the mirror the same way)."""
    return expr(
        """
            ${kinds}
        or
            label_replace(sum by ${g} (${tmpfs}) * 1.0000001, "kind", "${dev_shm_kind}", "", "")
        or
            label_replace(${hidden}, "kind", "${hidden_kind}", "", "")
        """,
        kinds=of(q.MEMORY_KIND + selector(one_of("kind", *RECORDED_KINDS))),
        g=by(*config.group_labels), tmpfs=of(q.TMPFS_USED), hidden=of(q.HIDDEN),
        dev_shm_kind=q.KIND_DEV_SHM, hidden_kind=q.KIND_HIDDEN)


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
    # What the hourly floor memory group records, held between its rounds.
    memory_hold = floor_memory_hold(config)
    # The hidden floor's "spans both windows": the series was there 45 minutes before the
    # earlier window's first hourly figure began, so that figure is past a young pod's
    # warm-up (its loading minutes are no floor to rise from). HOURLY_MAX is there from
    # the first figure on (SETTLED_HOURLY_MIN only past the first 45 minutes). The
    # unreclaimable floor and envelope read FLOOR_COVER instead.
    old = spans(q.HOURLY_MAX, 2 * bw_s + 2 * config.hourly_window_s - config.lasting_hold_s,
                config.lasting_hold_s)
    # How much of the earlier window the settled floor covers, where it covers at least
    # lasting_min_cover_s.
    covered = f"{q.FLOOR_COVER} >= {config.lasting_min_cover_s}"

    def window_ago(name: str) -> str:
        # The same figure recorded one window ago: the window a day ago was this rule's
        # own a day ago (the group runs at a fixed phase and a day is a whole number of
        # its intervals; else it is the figure recorded at most one interval earlier),
        # so it is read, not scanned again.
        return f"last_over_time({name}[{duration(config.lasting_hold_s)}] offset {bw})"

    def rise(name: str, guard: str = f"and on {gb}\n{old}") -> str:
        # The figure now minus the same figure a window ago. ``guard``: where the rise
        # is read (both windows spanned, by default) or how it is scaled.
        before = window_ago(name)
        return expr(
            """
            (
                ${name}
              - ${before}
            )
            ${guard}
            """,
            name=name, before=before, guard=guard)

    def killed(raw: str) -> str:
        # The counter now above its highest figure over the hold before the last
        # interval: a kill since, each one seen at the next evaluation.
        return counted(config, raw, config.lasting_hold_s, config.hold_s)

    # The growth the binding horizon reads: day over day where the lasting horizon
    # binds the pod (the only pods the day-over-day growth is recorded for), over the
    # last hour otherwise.
    lasting_binds = f'on {pod} {q.TIME_TO_LIMIT}{{horizon="lasting"}}'
    def kg(*kinds: str) -> str:
        sel = selector(one_of("kind", *kinds)) if kinds else ""
        return f"({q.KIND_LASTING_GROWTH}{sel} or {q.KIND_GROWTH}{sel})"

    pg = f"({q.PROCESS_LASTING_GROWTH} or {q.PROCESS_GROWTH})"
    top_kind = f"topk by {gb} (1, {kg()})"
    top_process = expr(
        """
            topk by ${g} (1, ${pg})
          or
            label_replace(topk by ${pod} (1, ${pg}), "container", "", "container", ".*")
        """,
        g=gb, pg=pg, pod=pod)
    period = duration(config.pattern_period_s)
    # What the daily pattern allows an hour to rise above the same hours a period ago:
    # a period of the lasting trend, plus the peaks' margin and the quiet hours' swing
    # (PATTERN_HOLDS over the window, ABOVE_PATTERN for the last hour).
    period_trend = f'{q.GROWTH}{{horizon="lasting"}} * {config.pattern_period_s}'
    pattern_allowance = (f"({config.fill_beyond_peaks_ratio} * {q.LIMIT}"
                         f" + on {gb} {q.QUIET_SWING})")

    def day_over_day(selector: str) -> str:
        # Only where the lasting horizon binds the pod (the top grower reads it nowhere
        # else): the hour now is filtered before it meets the hour a day ago, so the
        # subtraction and what follows touch those pods' series, not every cgroup's.
        return expr("((avg_over_time(${s}[${hw}]) and ${binds})"
                    " - avg_over_time(${s}[${hw}] offset ${p})) / ${p_s}",
                    s=selector, hw=hw, binds=lasting_binds, p=period,
                    p_s=config.pattern_period_s)

    # The process that grows most, unless what grows most is no process's memory (files
    # in /dev/shm no process maps, kernel memory, hidden charges): a constant vector of
    # the process kinds filters the top kind (reading their growth again would cost a
    # join over every kind of every cgroup).
    process_kinds = " or ".join(
        f'label_replace(vector(1), "kind", "{k}", "", "")' for k in PROCESS_KINDS)
    named = expr(
        """
        (${top_process}) > 0
        unless on ${g}
        (${top_kind} > 0 unless on (kind) (${process_kinds}))
        """,
        top_process=indent(top_process, 2), g=gb, top_kind=top_kind,
        process_kinds=process_kinds)
    # The envelope's smaller rise of the window just past and the one before it.
    env_before = (f"last_over_time({q.PEAK_ENVELOPE_RISE}[{duration(config.lasting_hold_s)}]"
                  f" offset {bw})")
    peaks_rise = (f"({q.PEAK_ENVELOPE_RISE} < on {gb} {env_before} or on {gb} {env_before}"
                  f" <= on {gb} {q.PEAK_ENVELOPE_RISE})")
    part_s = config.baseline_window_s // config.envelope_parts
    rate = f'{q.GROWTH}{{horizon="lasting"}}'
    # The envelope an hour of trend on (its youngest peak is that old); where the
    # pattern has teeth, each older part of the window carried on by the trend since it
    # ended, the highest: a flush's or a burst's timing is chance, and the day's tallest
    # may recur at any hour. A daily crest recurs at its hour, which the daily pattern
    # forecasts. group_left keeps each part's label (one-to-one matching on the group
    # labels would drop it, and `or` would then keep one part alone).
    older = "\n  or\n    ".join(
        f'label_replace(max_over_time({q.HOURLY_MAX}[{duration(part_s)}] offset '
        f'{duration(config.hourly_window_s + k * part_s)}), "part", "{k}", "", "")'
        f" + on {gb} group_left () {rate} * {config.hourly_window_s + k * part_s}"
        for k in range(1, config.envelope_parts))
    carried = expr(
        """
        max by ${g} (
            label_replace(${env}, "part", "0", "", "") + on ${g} group_left () ${rate} * ${hw_s}
          or
            (
                ${older}
            )
            and on ${g} ${has_teeth}
          or
            label_replace(${crest}, "part", "crest", "", "")
        )""",
        g=gb, env=q.PEAK_ENVELOPE, rate=rate, hw_s=config.hourly_window_s,
        older=indent(older, 4).strip(), has_teeth=q.TEETH, crest=q.TOOTH_CREST)
    # The floor's rise: from the highest floor of the week before where the peaks still
    # reach it and it is above the floor a window ago: a weekly pattern's weekday floor
    # comes back to last week's, no growth. That floor may be days old (a Friday's, read
    # on a Tuesday): the rise from it spans its age (HIGHEST_FLOOR_SINCE), scaled to a
    # window (weekly-leak seeds 2 and 4 read four days of a leak as one and paged 7-9 h
    # early). Where a leak outran the weekend's drop, the floor a window ago (the
    # weekend's) is itself the highest: the rise from a floor before the weekend's fall
    # (FLOOR_RISE_PAST_FALL) is then the smaller. A leak's floor rises above every floor
    # before it (the one a window ago is the highest) and never fell; after a restart
    # the old floors are above the new peaks and the floor a window ago counts, and so
    # after an OOM kill. From a young workload's part of the earlier window
    # (``covered``): the rise spans that part, not a window, and is scaled to one (the
    # envelope's rise spans a window either way: the peaks sit at the ends).
    floor_before = window_ago(q.UNRECLAIMABLE_BASELINE)
    from_highest = expr(
        """
        (
            ${floor}
          - on ${g}
            (
                (
                    last_over_time(${hf}[${memory_hold}]) <= on ${g} ${env}
                    unless on ${pod} max_over_time(${killed}[${memory}])
                )
              > on ${g}
                ${before}
            )
        )
        * on ${g}
        (${bw_s} / clamp_min(time() - last_over_time(${since}[${memory_hold}]), ${bw_s}))
        """,
        floor=q.UNRECLAIMABLE_BASELINE, g=gb, hf=q.HIGHEST_FLOOR, memory_hold=memory_hold,
        env=q.PEAK_ENVELOPE, pod=pod, killed=q.OOM_KILLED,
        memory=duration(config.floor_memory_s), before=floor_before, bw_s=bw_s,
        since=q.HIGHEST_FLOOR_SINCE)
    floor_rise = expr(
        """
        min by ${g} (
            label_replace(last_over_time(${past_fall}[${memory_hold}]), "from", "fall", "", "")
          or
            label_replace(
                ${from_highest}
              or
                ${floor} - ${before},
                "from", "day", "", ""
            )
        )
        * on ${g} (${bw_s} / (${covered}))
        """,
        past_fall=q.FLOOR_RISE_PAST_FALL, memory_hold=memory_hold,
        from_highest=indent(from_highest, 8), floor=q.UNRECLAIMABLE_BASELINE,
        before=floor_before, g=gb, bw_s=bw_s, covered=covered)
    rules_: list[tuple[str, str]] = [
        *breakdown_rules(config),
        (q.HOURLY_MAX, f"max_over_time({q.UNRECLAIMABLE}[{hw}])"),
        (q.HOURLY_MIN, f"min_over_time({q.UNRECLAIMABLE}[{hw}])"),
        # Past the workload's warm-up (a figure warm_up_s before the hour began): a
        # model's loading minutes are no floor (they still tell a quiet hour).
        (q.SETTLED_HOURLY_MIN, expr(
            "${hmin}\nand\n${settled}", hmin=q.HOURLY_MIN,
            settled=spans(q.UNRECLAIMABLE, config.hourly_window_s + config.warm_up_s,
                          config.lasting_hold_s))),
        # The settled figures of the window before the last, counted against those of
        # the last one (whatever the group's cadence: promtool's backfill and unit tests
        # run every group at one interval; two windows of one length hold as many at any
        # phase), as seconds of a window.
        (q.FLOOR_COVER, expr(
            "clamp_max(\n  ${bw_s} * count_over_time(${hmin}[${bw}] offset ${bw})\n"
            "  / on ${g} count_over_time(${hmin}[${bw}]),\n  ${bw_s}\n)",
            bw_s=bw_s, hmin=q.SETTLED_HOURLY_MIN, bw=bw, g=gb)),
        (q.WORKING_SET_HOURLY_MIN, f"min_over_time({q.WORKING_SET}[{hw}])"),
        (q.HIDDEN_HOURLY_MIN, f"min_over_time({q.HIDDEN}[{hw}])"),
        (q.UNRECLAIMABLE_BASELINE, f"min_over_time({q.SETTLED_HOURLY_MIN}[{bw}])"),
        # The floors the week remembers: of windows the workload lived most of, past
        # its warm-up. A young pod's first hours may hold no trough yet (late-leak seed
        # 26's read 68 % where its troughs were 60 %, and its leak's floor never rose
        # above it); its first day, read whole, may be its only weekday before a
        # weekend (weekly seed 0, started on a Friday).
        (q.WHOLE_BASELINE, expr(
            "${floor} and on ${g} last_over_time(${settled}[${hold}] offset ${cover})",
            floor=q.UNRECLAIMABLE_BASELINE, g=gb, settled=q.SETTLED_HOURLY_MIN,
            hold=duration(config.lasting_hold_s),
            cover=duration(config.floor_memory_min_cover_s))),
        # Before the last hour: a climb now is compared with what the peaks reached.
        (q.PEAK_ENVELOPE, f"max_over_time({q.HOURLY_MAX}[{bw}] offset {hw})"),
        (q.PEAK_LEVEL, f"{q.PEAK_ENVELOPE} > {q.HOURLY_MAX} or {q.HOURLY_MAX}"),
        # A kill ends a leak's climb: the floors before it are no pattern to come back to.
        (q.OOM_KILLED, expr(
            """
                max by ${pod} (${watcher}) > 0
              or
                max by ${pod} (${kernel}) > 0
            """,
            pod=pod, watcher=killed(exported(config, c.OOM_KILLS_TOTAL)),
            kernel=killed(exported(config, c.MEMORY_EVENTS_TOTAL, event=c.EVENT_OOM_KILL)))),
        (q.UNRECLAIMABLE_BASELINE_RISE, floor_rise),
        (q.PEAK_ENVELOPE_RISE, rise(q.PEAK_ENVELOPE, guard=f"and on {gb} ({covered})")),
        (q.HOURLY_RANGE, f"{q.HOURLY_MAX} - {q.HOURLY_MIN}"),
        # What the daily pattern's one-hour window (below) read for the hour just past,
        # a period ago, against what the hour did.
        (q.PATTERN_RISE, expr(
            "${hmax} - max_over_time(${hmax}[${span}] offset ${period})",
            hmax=q.HOURLY_MAX, span=duration(3 * config.lasting_interval_s),
            period=duration(config.pattern_period_s))),
        # The noise is what the hour's trend does not explain: the deviation of the
        # figure from its least-squares line (its variance less the slope's share,
        # slope^2 * var(t)), as the swing of an hour: four deviations. A leak's hour or a
        # tooth's climb is trend, not noise; the noise's own slope is not subtracted.
        # var(t) of n samples evenly spread: T^2 (n+1) / (12 (n-1)) when both edges of
        # the window hold one (the samples' step, T / (n-1), divides the window: a
        # Prometheus 2 window aligned with the figure's own evaluations, as in promtool),
        # else T^2 (n^2-1) / 12 n^2 (the step is T / n: a left-open window, Prometheus 3,
        # and any window whose group is not aligned with the figure's group, which is
        # every real Prometheus: groups are offset within their interval). Either is
        # exact where it applies, so a steady climb leaves no noise and a noisy one
        # keeps all of it; the larger one alone wipes a real noise out of every hour
        # that climbs steeply (a daily swing's sides, a fast leak), and the quiet swing
        # with it. (n+1) / 12 (n-1) is written (1 + 2 / (n-1)) / 12.
        (q.HOURLY_NOISE, expr(
            """
            ${swing} * sqrt(clamp_min(
                stddev_over_time(${u}[${hw}]) ^ 2
              -
                (deriv(${u}[${hw}]) * ${hw_s}) ^ 2
              *
                (
                    (1 + 2 / (count_over_time(${u}[${hw}]) - 1)) / 12
                  and
                    ${hw_s} % (count_over_time(${u}[${hw}]) - 1) == 0
                  or
                    (1 - 1 / count_over_time(${u}[${hw}]) ^ 2) / 12
                ),
                0
            ))""",
            swing=q.HOUR_SWING_DEVIATIONS, u=q.UNRECLAIMABLE, hw=hw,
            hw_s=config.hourly_window_s)),
        (q.QUIET_SWING,
         f"quantile_over_time({q.QUIET_QUANTILE}, {q.HOURLY_NOISE}[{bw}])"),
        # What the pattern is: a release (the last hour fell below the peaks before it:
        # a rise that never falls, a ramp or a leak, has none) or a quiet whole hour.
        (q.PATTERN_SIGN + "\tsign=release", expr(
            "(${hmin} < on ${g} (${env} - on ${g} ${r} * ${limit})) * 0 + 1",
            hmin=q.HOURLY_MIN, g=gb, env=q.PEAK_ENVELOPE, r=config.pattern_swing_ratio,
            limit=q.LIMIT)),
        (q.PATTERN_SIGN + "\tsign=quiet", expr(
            "(${range} < on ${g} ${r} * ${limit} and on ${g} ${full}) * 0 + 1",
            range=q.HOURLY_RANGE, g=gb, r=config.pattern_swing_ratio, limit=q.LIMIT,
            full=spans(q.UNRECLAIMABLE, config.hourly_window_s, 5 * 60))),
        (q.PATTERN_KNOWN, f"max by {gb} (present_over_time({q.PATTERN_SIGN}[{bw}]))"),
        (q.RELEASED, expr(
            "max by ${g} (present_over_time(${sign}{sign=\"release\"}[${w}]))",
            g=gb, sign=q.PATTERN_SIGN, w=duration(config.release_window_s))),
        # A sharp fall (a flush, a batch's end, a restart): 0 or 1 on every cgroup, so
        # that its changes over the envelope window count the falls (each reads 1 at
        # one or two evaluations: the window is longer than the interval and a step).
        (q.SHARP_RELEASE, expr(
            "max_over_time(${u}[${w}]) - ${u} > bool ${r} * ${limit}",
            u=q.UNRECLAIMABLE, w=duration(config.sharp_release_window_s),
            r=config.pattern_swing_ratio, limit=q.LIMIT)),
        # At least teeth_min_releases falls: k falls change the series 2k times at
        # most, so more than 2n - 2 changes are n falls or more; a window of them is
        # their period (each fall changes it twice, up and back down).
        (q.TEETH_PERIOD, f"{2 * bw_s} / (changes({q.SHARP_RELEASE}[{bw}])"
                         f" > {2 * config.teeth_min_releases - 2})"),
        (q.TEETH, f"{q.TEETH_PERIOD} * 0 + 1"),
        # Each release's base and the height of the tooth that fell: what the teeth's
        # crests are made of (recorded only where a release is in the window).
        (q.RELEASE_BASE, expr(
            "min_over_time(${u}[${w}]) and on ${g} ${sharp} == 1",
            u=q.UNRECLAIMABLE, w=duration(config.sharp_release_window_s), g=gb,
            sharp=q.SHARP_RELEASE)),
        (q.RELEASE_FALL, expr(
            "max_over_time(${u}[${w}]) - on ${g} ${base}",
            u=q.UNRECLAIMABLE, w=duration(config.sharp_release_window_s), g=gb,
            base=q.RELEASE_BASE)),
        (q.TOOTH_SPREAD, _tooth_spread(config)),
        (q.TOOTH_CREST, _tooth_crest(config)),
        (q.PATTERN_CEILING, _pattern_ceiling(config)),
        (q.WORKING_SET_BASELINE, f"min_over_time({q.WORKING_SET_HOURLY_MIN}[{bw}])"),
        (q.HIDDEN_BASELINE, f"min_over_time({q.HIDDEN_HOURLY_MIN}[{bw}])"),
        (q.HIDDEN_BASELINE_RISE, rise(q.HIDDEN_BASELINE)),
        # A fall below the floor (a leak fixed in place, a restart without a kill): the
        # floor as it stood before (the highest of two windows: a fall only lowers it),
        # where all of the last window is below it by the pattern's swing; held while
        # the memory stays below it and the envelope still holds a peak above it. Not
        # after an OOM kill (the floors before a kill are read as such: HIGHEST_FLOOR,
        # FLOOR_RISE_PAST_FALL).
        (q.FALLEN_FLOOR, expr(
            """
            (
                (
                    max_over_time(${floor}[${fw2}])
                  > on ${g}
                    max_over_time(${u}[${fw}]) + on ${g} ${r} * ${limit}
                )
              or on ${g}
                (
                    last_over_time(${fallen}[${hold}])
                  > on ${g}
                    max_over_time(${u}[${fw}]) + on ${g} ${r} * ${limit}
                  < on ${g}
                    ${env}
                )
            )
            unless on ${pod} max_over_time(${killed}[${bw}])
            """,
            floor=q.UNRECLAIMABLE_BASELINE, hold=duration(config.lasting_hold_s),
            fw=duration(config.fallen_floor_window_s),
            fw2=duration(2 * config.fallen_floor_window_s), g=gb, u=q.UNRECLAIMABLE,
            r=config.pattern_swing_ratio, limit=q.LIMIT, fallen=q.FALLEN_FLOOR,
            env=q.PEAK_ENVELOPE, pod=pod, killed=q.OOM_KILLED, bw=bw)),
        # Lasting: both the floor and the envelope of the peaks rose (the smaller rise),
        # by more than noise: a daily swing, a sawtooth or a warm-up (the floor rose, the
        # peaks did not) is no lasting growth. Or the peaks alone rose, a window running
        # and the window before (the smaller rise), above every peak of the floor memory
        # before by half that rise: what kills a batch or a swing that grows while its
        # floor stays is its peaks. One high day (a burst) rises once; a weekly pattern's
        # weekday peaks come back to last week's (HIGHEST_ENVELOPE), within its noise
        # of them, after rising a weekend's drop. Where the peaks rose above last week's
        # highest less over its age (HIGHEST_ENVELOPE_SINCE), that rise: a leak under a
        # weekly pattern, read on a Tuesday, rose from Friday's peaks at its own rate, not
        # the weekend's return (the weekly pattern's leaking pod ticketed on a Tuesday,
        # its forecast 25-64 h to a limit a week away). None while the memory is below a
        # fallen floor.
        (q.GROWTH + "\tlasting", expr(
            """
            (
                (
                    (${floor} < ${env} or ${env})
                  > on ${g}
                    ${minimum}
                )
              or on ${g}
                (
                    min by ${g} (
                        label_replace(${peaks_rise}, "from", "day", "", "")
                      or
                        label_replace(
                            (${envelope} - on ${g} last_over_time(${highest}[${hold}]))
                          * on ${g}
                            (${bw_s} / clamp_min(time() - ${since}, ${bw_s}))
                          and on ${g}
                            ${peaks_rise},
                            "from", "highest", "", ""
                        )
                    )
                  > on ${g}
                    ${minimum}
                  unless on ${g}
                    last_over_time(${highest}[${hold}]) + on ${g} ${peaks_rise} / 2
                  >= on ${g}
                    ${envelope}
                )
            )
            / ${bw_s}
            unless on ${g}
            ${fallen}
            """,
            floor=q.UNRECLAIMABLE_BASELINE_RISE, env=q.PEAK_ENVELOPE_RISE, g=gb,
            minimum=min_rise(config),
            peaks_rise=peaks_rise,
            highest=q.HIGHEST_ENVELOPE, envelope=q.PEAK_ENVELOPE,
            since=f"last_over_time({q.HIGHEST_ENVELOPE_SINCE}[{memory_hold}])",
            hold=memory_hold,
            bw_s=bw_s, fallen=q.FALLEN_FLOOR)),
        # Where a peak as tall as the day's tallest stands now (teeth: at any hour).
        (q.PEAK_CARRIED, carried),
        # The daily pattern's lift: a period of lasting growth, or what the recent hours
        # rose above the same hours a period ago where that is more (the least of them:
        # every one of those hours rose that much), up to pattern_recent_max_trends
        # periods of it. The lasting rate compares a window with the one before and lags
        # a leak younger than two windows (the earlier one holds pre-leak hours); the
        # hours a period ago are past the leak's start a window sooner. The cap: a step
        # a period ago rose the recent hours above theirs as much, and the hours ahead a
        # period ago already hold it (a leak 1.5 windows old reads half its rate). Only
        # where lasting growth is seen; recorded once for the four windows ahead.
        # (max by: one series per cgroup, whichever branch gives it; the lasting
        # trend's horizon label goes.)
        # Uncapped where that rise is a ramp (its least over the recent hours grew by
        # more than a share of itself over the ramp window, above the most of the same
        # hours then): a leak younger than a day and a half; a step a period ago lifted
        # the recent hours at once, and its rise has stood still since. Not where the
        # pattern has teeth: teeth that drift through the day rise and fall against the
        # same hours a period ago by most of their height (sawtooth seed 4 read a ramp
        # 23 h before its kill, and its pattern put the limit within the hour).
        # A ramp lifts by its rise, at most by a period of the rise's own growth: the
        # faster of the ramp window's two halves, scaled to a period. A young leak's
        # rise grows by its rate, so that reads a period of the leak, more than its
        # rise; a leak older than a period has a rise that stopped growing, but its
        # earlier half still grew by its rate. A step followed by a leak rises by both,
        # but its rise grows by the leak alone, and the hours ahead a period ago hold
        # the step (reload-then-leak seed 24 counted a 25 % step twice, paged 25 h early).
        (q.PATTERN_LIFT, expr(
            """
            max by ${g} (
                (
                    (
                        last_over_time(${prise}[${hold}])
                      - on ${g}
                        clamp_min(
                            last_over_time(${prise}[${hold}])
                          - on ${g}
                            ${ramp_growth},
                            0
                        )
                      or on ${g}
                        last_over_time(${prise}[${hold}])
                    )
                    and on ${g}
                    ${kept} * min_over_time(${prise}[${recent}])
                  > on ${g}
                    max_over_time(${prise}[${recent}] offset ${ramp})
                  unless on ${g}
                    ${teeth}
                  or on ${g}
                    min_over_time(${prise}[${recent}]) < on ${g} ${cap} * ${period_trend}
                  or on ${g}
                    ${cap} * ${period_trend} and on ${g} min_over_time(${prise}[${recent}])
                )
              > on ${g}
                ${period_trend}
              or on ${g}
                ${period_trend}
            )
            """,
            prise=q.PATTERN_RISE, g=gb, cap=config.pattern_recent_max_trends,
            recent=duration(config.pattern_recent_s), period_trend=period_trend,
            kept=number(1 - config.pattern_ramp_share), hold=duration(config.lasting_hold_s),
            ramp=duration(config.pattern_ramp_s), teeth=q.TEETH,
            ramp_growth=_ramp_growth(config))),
        # The daily pattern ahead: the hours ahead one period ago (their hourly maxima,
        # recorded every lasting interval), lifted.
        *((q.PATTERN_PEAK + f"\twithin={duration(w)}", expr(
            """
                max_over_time(${hmax}[${span}] offset ${back})
              + on ${g}
                ${lift}
            """,
            hmax=q.HOURLY_MAX, g=gb, lift=q.PATTERN_LIFT,
            span=duration(w - config.hourly_window_s + 3 * config.lasting_interval_s),
            back=duration(config.pattern_period_s - w)))
          for w in pattern_windows_s(config)),
        # The daily pattern holds where no hour of the envelope window rose above its
        # pattern's by more than its lift explains (the lasting trend, or a young leak's
        # rise now: every hour of its day rose less than the last), within the peaks' margin
        # and the quiet hours' swing: a sawtooth whose teeth drift through the day, a
        # weekday after a weekend or a new load does not hold.
        (q.PATTERN_HOLDS, expr(
            """
            (
                max_over_time(${rise}[${bw}]) - on ${g} ${trend}
              < on ${g}
                ${allowance}
              and on ${g}
                ${spans}
            ) * 0 + 1
            """,
            rise=q.PATTERN_RISE, bw=bw, g=gb, trend=q.PATTERN_LIFT, allowance=pattern_allowance,
            spans=spans(q.PATTERN_RISE, bw_s - config.lasting_hold_s,
                        config.lasting_hold_s))),
        # The last hour rose above the same hours a period ago by more than a period of
        # the lasting trend explains, beyond the peaks' margin and the quiet hours'
        # swing: growth faster than the day's average (a leak that speeds up). A daily
        # swing's climb, even over a slow leak, rises no more than its trend. Not where
        # the pattern has teeth: they drift through the day, so an hour rises above the
        # same hour a period ago by a tooth's height at every other hour (TOOTH_CREST
        # says how high a tooth goes).
        (q.ABOVE_PATTERN, expr(
            """
            (
                ${rise} - on ${g} (${trend} or on ${g} ${limit} * 0)
              > on ${g}
                ${allowance}
              unless on ${g}
                ${teeth}
            ) * 0 + 1
            """,
            rise=q.PATTERN_RISE, g=gb, trend=period_trend, limit=q.LIMIT,
            allowance=pattern_allowance, teeth=q.TEETH)),
        (q.GREW, f"max by {gb} (present_over_time({q.GROWTH}[{duration(config.lasting_hold_s)}]))"),
        # Recorded once a round: NearLimit read a day of GREW each minute.
        (q.GREW_LATELY, f"max_over_time({q.GREW}[{bw}])"),
        (q.KIND_GROWTH, _per_kind(config, lambda sel: f"deriv({sel}[{hw}])")),
        (q.PROCESS_GROWTH, f"deriv({q.PROCESS_MEMORY}[{hw}])"),
        # Where the pod's floor does not rise, what grows is in its peaks (the hourly
        # group's day over day of each series' highest figure): held, as that group
        # records it once an hour.
        (q.KIND_LASTING_GROWTH, expr(
            "last_over_time(${peaks}[${hold}]) and ${binds}\nor\n${hours}",
            peaks=q.KIND_PEAK_GROWTH, hold=memory_hold, binds=lasting_binds,
            hours=_per_kind(config, day_over_day))),
        (q.PROCESS_LASTING_GROWTH, expr(
            "last_over_time(${peaks}[${hold}]) and ${binds}\nor\n${hours}",
            peaks=q.PROCESS_PEAK_GROWTH, hold=memory_hold, binds=lasting_binds,
            hours=day_over_day(q.PROCESS_MEMORY))),
        # A process is named when the kind that grows most is a process's (anon, shmem)
        # or no kind is reported (then it is anon's); else the kind alone (/dev/shm
        # files, kernel memory). Each growth is read twice at most: it is the costliest
        # rule of the group.
        (q.TOP_GROWER, expr(
            """
            (
                (${named})
              * on ${g} group_left (kind)
                (
                    topk by ${g} (1, ${kg}) * 0 + 1
                  or on ${g}
                    label_replace(${binding}, "kind", "${anon}", "", "") * 0 + 1
                )
              or on ${g}
                ${top_kind}
            )
            and on ${g} ${binding} == 1
            """,
            named=indent(named, 4), g=gb, top_kind=top_kind, kg=kg(*PROCESS_KINDS),
            anon=c.KIND_ANON, binding=q.BINDING)),
        (q.VLLM_ANSWERED, f"max_over_time({q.VLLM_UP}[{hw}]) > 0"),
        (q.VLLM_ANSWERED_LATELY, f"max_over_time({q.VLLM_ANSWERED}"
                                 f"[{duration(config.baseline_window_s)}])"),
        # SharedMemoryFillingUp's trend: hours of every mount's figure, read here every
        # lasting interval rather than by the alert every minute.
        (q.TMPFS_PREDICTED, expr(
            "predict_linear(${used}[${w}], ${horizon})\nand\n${spans}",
            used=q.TMPFS_USED, w=duration(config.shm_fill_window_s),
            horizon=config.shm_fill_horizon_s,
            spans=spans(q.TMPFS_USED, config.shm_fill_window_s // 2,
                        config.shm_fill_window_s // 2))),
    ]
    return recording_rules(rules_, q.LASTING_RECORDING_RULE_HELP)


def _floor_rise_past_fall(config: Config) -> str:
    """The floor now above each whole floor 2-6 windows ago (read at whole windows back,
    as the lasting group recorded it) that a later whole floor fell below by the peaks'
    margin, over its age: a weekly pattern's quiet days put a low floor a window ago
    (Sunday's, read on a Tuesday morning), and where a leak outran the weekend's drop
    that floor is also the week's highest, so the rise from it is a day's leak plus the
    weekend's drop (weekly-leak seed 4 read 2.6 times its leak and paged 6 h early).
    A floor no later one fell below (a leak's, a warm-up's) is not read: a leak younger
    than those windows would read slower over them. Where the peaks now reach that floor
    (a restart's old floors are above them) and no kill came since."""
    g = by(*config.group_labels)
    bw = config.baseline_window_s
    hold = duration(config.lasting_hold_s)

    def whole(k: int) -> str:
        return f"last_over_time({q.WHOLE_BASELINE}[{hold}] offset {duration(k * bw)})"

    def later(k: int) -> str:
        # The lowest whole floor of the windows since.
        if k == 2:
            return whole(1)
        return "min by {g} ({floors})".format(g=g, floors=" or ".join(
            f'label_replace({whole(j)}, "windows", "{j}", "", "")' for j in range(1, k)))

    parts = "\n  or\n".join(expr(
        """
        label_replace(
            (last_over_time(${floor}[${hold}]) - on ${g} ${whole}) / ${k}
            and on ${g}
            (${whole} - on ${g} ${margin} * ${limit} > on ${g} ${later})
            and on ${g}
            (${whole} <= on ${g} last_over_time(${env}[${hold}])),
            "windows", "${k}", "", ""
        )""",
        floor=q.UNRECLAIMABLE_BASELINE, hold=hold, g=g, whole=whole(k), k=k,
        margin=config.fill_beyond_peaks_ratio, limit=q.LIMIT, later=later(k),
        env=q.PEAK_ENVELOPE) for k in range(2, config.floor_memory_s // bw))
    return expr(
        """
        min by ${g} (
        ${parts}
        )
        unless on ${pod} max_over_time(${killed}[${memory}])
        """,
        g=g, parts=indent(parts, 2), pod=by(*config.pod_labels), killed=q.OOM_KILLED,
        memory=duration(config.floor_memory_s))


def floor_memory_recording_rules(config: Config) -> list[Rule]:
    """Evaluated every ``floor_memory_interval_s``: the highest floor and envelope of the
    floor memory before the last envelope window (a week of the lasting group's figures,
    read once an hour: a sixth of a day's window per lasting round would cost more than
    the group)."""
    back = config.floor_memory_s - config.baseline_window_s
    gb = by(*config.group_labels)
    bw = duration(config.baseline_window_s)
    # The pods the lasting horizon binds where no cgroup's floor rises: growth in the
    # peaks alone (a batch that grows over a flat floor).
    peaks_only = expr(
        """
        ${ttl}{horizon="lasting"}
          unless on ${pod} (last_over_time(${floor}[${hold}]) > on ${g} ${minimum})
        """,
        ttl=q.TIME_TO_LIMIT, pod=by(*config.pod_labels), floor=q.UNRECLAIMABLE_BASELINE_RISE,
        hold=duration(config.lasting_hold_s), g=gb, minimum=min_rise(config))

    def peak_rise(selector: str) -> str:
        # The window's highest figure minus the window before's, per second: read once
        # an hour, and the subtraction only for the pods it is recorded for.
        return expr("((max_over_time(${s}[${bw}]) and on ${pod} (${peaks_only}))"
                    " - max_over_time(${s}[${bw}] offset ${bw})) / ${bw_s}",
                    s=selector, bw=bw, pod=by(*config.pod_labels), peaks_only=peaks_only,
                    bw_s=config.baseline_window_s)

    memory_hold = floor_memory_hold(config)

    # When the highest figure was recorded: now less a window where the figure that just
    # entered the memory is its highest (a leak's, each round; the latest of equal
    # figures: a day's peak the envelope holds a day), else as recorded before while
    # that figure is still in the memory, else unknown and taken as the oldest the
    # memory holds (its highest left it, or its history broke: the rise from it then
    # reads slowest).
    def since(recorded: str, highest: str, since_name: str) -> str:
        return expr(
            """
                (
                    last_over_time(${recorded}[${hold}] offset ${bw})
                  >= on ${g}
                    ${highest}
                ) * 0 + time() - ${bw_s}
              or
                last_over_time(${since}[${memory_hold}]) > time() - ${memory_s}
                and on ${g}
                ${highest}
              or
                ${highest} * 0 + time() - ${memory_s}
            """,
            recorded=recorded, hold=duration(config.lasting_hold_s), bw=bw, g=gb,
            highest=highest, bw_s=config.baseline_window_s, since=since_name,
            memory_hold=memory_hold, memory_s=config.floor_memory_s)

    return recording_rules([
        (q.HIGHEST_FLOOR, f"max_over_time({q.WHOLE_BASELINE}[{duration(back)}]"
                          f" offset {bw})"),
        (q.HIGHEST_FLOOR_SINCE, since(q.WHOLE_BASELINE, q.HIGHEST_FLOOR, q.HIGHEST_FLOOR_SINCE)),
        (q.FLOOR_RISE_PAST_FALL, _floor_rise_past_fall(config)),
        (q.HIGHEST_ENVELOPE, f"max_over_time({q.PEAK_ENVELOPE}[{duration(back)}]"
                             f" offset {bw})"),
        (q.HIGHEST_ENVELOPE_SINCE,
         since(q.PEAK_ENVELOPE, q.HIGHEST_ENVELOPE, q.HIGHEST_ENVELOPE_SINCE)),
        (q.KIND_PEAK_GROWTH, _per_kind(config, peak_rise)),
        (q.PROCESS_PEAK_GROWTH, peak_rise(q.PROCESS_MEMORY)),
    ], q.FLOOR_MEMORY_RECORDING_RULE_HELP)
