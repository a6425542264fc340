"""Pure rules: the evidence fetched for one pod -> a diagnosis in plain words.

The model is the alerts' (``alerts/rules.py``): the kernel OOM-kills a cgroup when its
*unreclaimable* memory (anon, shmem, kernel) reaches its limit; page cache is always
reclaimed first. Growth that lasts is the rise of the daily floor (the lowest figure in
the last day against the day before), which diurnal load cannot fake; with less than two
days of history the slope over what there is stands in for it.

Nothing here does I/O: ``explain`` fetches an :class:`Evidence`, this module judges it,
and the renderers print the :class:`Diagnosis`.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Iterable, Sequence

from exporter.oncall.diagnosis.causes import causes_of, limit_advice, runbook
from exporter.oncall.diagnosis.evidence import CgroupEvidence, Evidence, Trend
from exporter.oncall.diagnosis.growth import (
    forecast_grower,
    forecast_growth,
    growth_of,
    growth_threshold,
)
from exporter.oncall.diagnosis.verdict import (
    AT_RISK,
    AT_RISK_HORIZON,
    HEALTHY,
    NEAR_LIMIT_RATIO,
    NO_DATA,
    PAGE_HORIZON,
    RUNBOOK_BASE,
    Closeness,
    Diagnosis,
    Kill,
)
from exporter.oncall.forecast import HORIZONS, NOISE_BAND_SWINGS, tightest
from exporter.oncall.units import fit, fmt_bytes, fmt_duration, fmt_rate, where


def _closeness(cg: CgroupEvidence) -> Closeness:
    u = cg.unreclaimable
    headroom = max(0.0, cg.limit - u.now)
    lasting = u.lasting()
    ttl = None
    if lasting is not None and lasting > growth_threshold(cg.limit):
        ttl = headroom / lasting
    return Closeness(
        where(cg.container), cg.container, cg.limit, u.now, headroom,
        u.now / cg.limit if cg.limit > 0 else 1.0, lasting, ttl, u.d1h, u.d6h, u.d1d,
        u.rise1d, cg.usage, cg.working_set, cg.reclaim_per_s)


def _binding(cgroups: Iterable[CgroupEvidence]) -> tuple[CgroupEvidence, Closeness]:
    """The cgroup that reaches its limit first (else the fullest): the one the kernel
    will OOM-kill in. The pod-level cgroup has its own limit and charges."""
    pairs = sorted(((cg, _closeness(cg)) for cg in cgroups), key=lambda p: (
        p[1].time_to_limit_s if p[1].time_to_limit_s is not None else math.inf,
        -p[1].ratio, p[0].container != ""))
    best = pairs[0]
    if best[0].container == "":
        # A single-container pod: the pod cgroup is its container plus a few MiB of its
        # own, so it always wins by a hair. Name the container when it is as close: its
        # processes explain the growth; the pod level wins only with charges of its own
        # (a sidecar, files a dead container left).
        for cg, cl in pairs[1:]:
            p = best[1]
            if (cl.time_to_limit_s is not None and p.time_to_limit_s is not None
                    and cl.time_to_limit_s <= 1.1 * p.time_to_limit_s) or (
                    cl.time_to_limit_s is None and p.time_to_limit_s is None
                    and cl.ratio >= p.ratio - 0.02):
                return cg, cl
    return best


def _from_forecast(ev: Evidence) -> tuple[CgroupEvidence, Closeness]:
    """The binding cgroup and its closeness from the forecast contract's series: the one
    answer every surface gives (time to limit at the horizon that binds)."""
    f = tightest(ev.forecasts)
    assert f is not None
    cg = next((c for c in ev.cgroups if c.container == f.container), None)
    if cg is None:
        cg = CgroupEvidence(f.container, f.limit, Trend(f.unreclaimable))
    return cg, dataclasses.replace(
        _closeness(cg), limit=f.limit, unreclaimable=f.unreclaimable, headroom=f.headroom,
        ratio=f.ratio, lasting_rate=f.rate, time_to_limit_s=f.time_to_limit,
        horizon=f.horizon, source=f.source,
        by_horizon=tuple((h, f.growth[h]) for h in HORIZONS if h in f.growth),
        peak_swings=f.peak_swings)


def diagnose(ev: Evidence, runbook_base: str = RUNBOOK_BASE) -> Diagnosis:
    if not ev.cgroups:
        return Diagnosis(ev.namespace, ev.pod, ev.at, NO_DATA,
                         "NO DATA: no headroom memory series for this pod; nothing to judge.",
                         notes=("is the exporter scraped (job, selector) and the pod on a "
                                "node that runs it?",))
    cg, close = _from_forecast(ev) if ev.forecasts else _binding(ev.cgroups)
    thr = growth_threshold(cg.limit)
    # Attribute lasting growth; a cgroup near its limit without any (a fresh ramp), or one
    # whose forecast comes from a short or medium climb, is explained by what moves now.
    # Just after a kill the last hour's slope is the climb into it, not one going on.
    killed = any(k.when is not None and ev.at - k.when < PAGE_HORIZON for k in ev.kills)
    climb = None if killed else _fresh_climb(close, thr)
    sustained = not ((close.time_to_limit_s is None and close.ratio >= NEAR_LIMIT_RATIO)
                     or close.horizon in ("short", "medium") or climb is not None)
    growth = growth_of(ev, cg, sustained, thr)
    causes = causes_of(ev, cg, close, growth, sustained, thr, runbook_base)
    kills = tuple(Kill(k.container, k.process, int(k.total), round(k.last_day),
                       f"http://{k.exporter}/debug/oom/", k.when,
                       None if k.when is None else max(0.0, ev.at - k.when), k.grew)
                  for k in sorted(ev.kills, key=lambda k: (-k.last_day, -(k.when or 0)))
                  if k.total > 0)

    reasons: list[str] = []
    if close.ratio >= NEAR_LIMIT_RATIO:
        reasons.append(f"unreclaimable memory is {close.ratio:.0%} of the limit")
    if close.time_to_limit_s is not None and close.time_to_limit_s < AT_RISK_HORIZON:
        reasons.append(f"it reaches the limit in about {fmt_duration(close.time_to_limit_s)}"
                       + (f" ({HORIZON_WORDS[close.horizon]})" if close.horizon in
                          HORIZON_WORDS else ""))
    if close.peak_swings is not None and close.peak_swings < NOISE_BAND_SWINGS:
        # The page's noise band: the trend's hours do not time this kill, the next
        # excursion does.
        reasons.append(f"its peaks are within the noise of the limit ({close.peak_swings:.2f} "
                       "of its quiet hours' swing): the next excursion like it reaches "
                       "the limit")
    if climb is not None:
        reasons.append(f"it climbs {fmt_rate(close.trend_1h)} now: the limit in about "
                       f"{fmt_duration(climb)} at this rate (too fresh for the forecast's "
                       "sustained horizons)")
    if any(c.code == "kv_offload" and "killed when the tier fills" in c.detail
           for c in causes):
        reasons.append("vLLM's CPU KV-offload tier does not fit in the headroom")
    recent = sum(k.last_day for k in kills)
    if recent:  # first: a pod that was just killed will be again
        victims = ", ".join(dict.fromkeys(k.process for k in kills if k.last_day))
        reasons.insert(0, f"{recent} OOM kill{'s' if recent > 1 else ''} in the last day "
                          f"(victim {victims})")
    verdict = AT_RISK if reasons else HEALTHY

    grew = [g for g in growth if g.what != "page_cache"]
    # One line names the fastest kind, then the fastest process, then what no process
    # owns: "anon, EngineCore process". The forecast's top grower comes first: it is the
    # answer the page, the dashboard and top give.
    picks = [next((g for g in grew if g.what in group), None)
             for group in (("kind",), ("process",), ("no_owner", "orphaned", "tmpfs"))]
    what = ", ".join(g.name if g.what != "process" else f"{g.name} process"
                     for g in picks if g is not None)
    fg = forecast_grower(ev, cg.container)
    if fg:
        what = fg
        close = dataclasses.replace(close, grower=fg)
    if climb is not None:
        rate = close.trend_1h
    elif close.source in ("recorded", "local"):
        rate = close.lasting_rate
    else:
        rate = close.lasting_rate if sustained else close.trend_1h
        rate = rate if rate is not None and rate > thr else None
    if verdict == AT_RISK:
        summary = (f"AT RISK: {where(cg.container)}: {'; '.join(reasons)}"
                   + (f"; growing {fmt_rate(rate)} ({what})" if (grew or fg) and rate
                      else "") + ".")
    else:
        summary = (f"HEALTHY: unreclaimable memory is {close.ratio:.0%} of the "
                   f"{fmt_bytes(cg.limit)} limit"
                   + (f" and grows slowly ({what}, {fmt_rate(rate)})" if (grew or fg)
                      and rate else " and grows slowly" if rate
                      else " and is not growing") + ".")
        if any(g.name == "page cache (reclaimable)" for g in growth):
            summary = summary[:-1] + "; page cache grows, which the kernel reclaims."
    headline = _headline(ev, verdict, close, kills, rate, climb)
    # "What grows": with a forecast, the series the page's text reads (TOP_GROWER,
    # KIND_GROWTH, PROCESS_GROWTH), so both name the same process and rate. A climb too
    # fresh for the forecast (said so above) is told by what moves now: the recorded
    # growth per kind is the last hour's, recorded every few minutes.
    shown = forecast_growth(ev, cg, thr, growth) if ev.forecasts and climb is None \
        else growth

    killed_recently = any(k.last_day for k in kills)
    grew_rate = next((k.grew_rate for k in ev.kills if k.grew_rate), None)
    actions: list[str] = []
    alerts = []
    if close.ratio >= NEAR_LIMIT_RATIO:
        alerts.append("HeadroomMemoryNearLimit")
    if close.time_to_limit_s is not None:
        alerts.append("HeadroomMemoryFillingUp")
    if kills:
        alerts.append("HeadroomPodOOMKilled")
    runbooks = list(dict.fromkeys([runbook(runbook_base, a) for a in alerts]
                                  + [c.runbook for c in causes if c.runbook]))
    if verdict == AT_RISK or causes:
        for c in causes:
            if c.settings:
                actions.append(f"{c.title}: check {', '.join(c.settings)}")
        actions.append(limit_advice(cg, close, killed_recently, grew_rate))
        if any(c.code == "stale_shm" for c in causes):
            actions.append("remove the stale files (the ls command above shows them) "
                           "or delete the pod: only a new pod gets a fresh /dev/shm")
        actions += [f"runbook: {r}" for r in runbooks[:3]]
    commands = _commands(ev, cg.container, kills, verdict == AT_RISK or bool(causes))
    notes: list[str] = []
    if close.working_set is not None and close.usage is not None:
        notes.append(f"working set {fmt_bytes(close.working_set)} (the kubelet's figure) "
                     f"vs unreclaimable {fmt_bytes(close.unreclaimable)}: the working set "
                     "counts page cache the kernel can take back")
    if close.source == "local":
        notes.append("the recording rules are not loaded: the forecast was computed here "
                     "from the raw series (the rules' definition, "
                     "exporter/oncall/forecast/mirror.py)")
    return Diagnosis(ev.namespace, ev.pod, ev.at, verdict, summary, tuple(reasons), close,
                     tuple(shown), tuple(causes), kills, tuple(actions), tuple(notes),
                     headline, commands)


HORIZON_WORDS = {"short": "climbing for minutes", "medium": "climbing for hours",
                 "lasting": "growth over days"}


def _fresh_climb(close: Closeness, thr: float) -> float | None:
    """Seconds to the limit at the last hour's slope, when the forecast has none and that
    slope reaches the limit within the page's horizon (a climb of a minute or two)."""
    slope = close.trend_1h
    if close.time_to_limit_s is not None or close.source == "trends" or slope is None \
            or slope <= thr:
        return None
    t = close.headroom / slope
    return t if t < PAGE_HORIZON else None


def _headline(ev: Evidence, verdict: str, close: Closeness, kills: Sequence[Kill],
              rate: float | None, climb: float | None = None) -> str:
    word = {AT_RISK: "AT RISK", HEALTHY: "HEALTHY", NO_DATA: "NO DATA"}[verdict]
    if close.time_to_limit_s is not None:
        num = f"limit in {fmt_duration(close.time_to_limit_s)}"
    elif climb is not None:
        num = f"climbing, limit in ~{fmt_duration(climb)}"
    else:
        num = f"{close.ratio:.0%} of limit" + ("" if rate else ", flat")
    fresh = [k for k in kills if k.last_day and k.age_s is not None]
    if fresh:
        num = f"OOM-killed {fmt_duration(fresh[0].age_s or 0.0)} ago; " + num
    tail = f": {num}"
    name = f"{ev.namespace}/{ev.pod}" if ev.namespace else ev.pod
    room = 80 - len(word) - 1 - len(tail)
    return f"{word} {fit(name, max(12, room))}{tail}"[:80]


def _commands(ev: Evidence, container: str, kills: Sequence[Kill], wanted: bool
              ) -> tuple[str, ...]:
    """Ready to paste: the real namespace, pod and container, quoted for a shell."""
    if not wanted or not ev.namespace:
        return ()
    ns, pod = shlex.quote(ev.namespace), shlex.quote(ev.pod)
    inner = container or next((p.container for p in ev.processes if p.container), "")
    cflag = f" -c {shlex.quote(inner)}" if inner else ""
    out = [f"kubectl -n {ns} describe pod {pod}",
           f"kubectl -n {ns} exec {pod}{cflag} -- ls -la /dev/shm",
           f"kubectl -n {ns} exec {pod}{cflag} -- sh -c 'cat /sys/fs/cgroup/memory.stat "
           "2>/dev/null || cat /sys/fs/cgroup/memory/memory.stat'"]
    if kills:
        out.insert(1, f"curl -s {shlex.quote(kills[0].postmortem)}")
    return tuple(out)
