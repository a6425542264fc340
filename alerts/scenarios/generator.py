"""Scenario classes, not cases: each class of failure (or healthy pattern) the rules must
handle, drawn with random parameters from a seed, and the properties every draw must
have.

A class is a function ``(rng) -> Draw``: it picks the rate, the limit, the noise, the
period, the scrape interval (20-120 s), when the leak starts and how long pods live from
``rng``, builds the exporter series the way a cluster delivers them (``recording.Recorder``:
staleness markers, new instances, restarts) and states what must hold: which alerts must
notify and which may, the lead windows before the kill, how many notifications one
incident may send (through the shipped inhibition), and silence on healthy patterns.

``draw(cls, seed, variant)`` makes one; variant 0 replays the rules as shipped with
samples on the evaluations, 1 with samples half way between them (the second phase),
2 with every range 1 ms shorter (Prometheus 3's left-open ranges). ``verdict`` reads a
replay. ``scripts/replay_draws.py`` runs 30 draws per class; the replay tier a few.

The classes are in ``killed`` (those a kill ends) and ``healthy`` (the others); ``draws``
holds ``Draw`` and the pieces they build one from.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable

from . import evaluate, healthy, killed
from .draws import MAX_NOTIFICATIONS, Draw
from .evaluate import Stat
from .recording import FILL, Key

VARIANTS = ("shipped", "phase", "shortened")

CLASSES: dict[str, Callable[[random.Random], Draw]] = {
    "limit-raised": healthy.limit_raised,
    "limit-cut": killed.limit_cut,
    "sawtooth": killed.sawtooth,
    "sawtooth-healthy": healthy.sawtooth_healthy,
    "slow-leak-big-limit": killed.slow_leak_big_limit,
    "jobs-beside-leak": killed.jobs_beside_leak,
    "vllm-without-server": healthy.vllm_without_server,
    "crash-loop": killed.crash_loop,
    "ramp": killed.ramp_to_kill,
    "sidecar-socket-leak": killed.sidecar_socket_leak,
    "two-vllm": killed.two_vllm,
    "daily-swing": healthy.daily_swing,
    "warm-up": healthy.warm_up,
    "exporter-gaps": killed.exporter_gaps,
    "fast-ramp": killed.fast_ramp,
    "nightly-plateau": healthy.nightly_plateau,
    "weekly": healthy.weekly,
    "leak-restarted": killed.leak_restarted,
    "staircase": killed.staircase,
    "accelerating": killed.accelerating,
    "pod-level-limit": killed.pod_level_limit,
    "saturating-kill": killed.saturating_kill,
    "growing-batch": killed.growing_batch,
    "step-up": healthy.step_up,
    "saturating": healthy.saturating,
    "bursty-leak": killed.bursty_leak,
    "bursty-healthy": healthy.bursty_healthy,
    "raised-then-leak": killed.raised_then_leak,
    "jittered-sawtooth": killed.jittered_sawtooth,
    "jittered-sawtooth-healthy": healthy.jittered_sawtooth_healthy,
    "late-leak": killed.late_leak,
    "traffic-leak": killed.traffic_leak,
    "reload-then-leak": killed.reload_then_leak,
    "noisy-flat": healthy.noisy_flat,
    "weekly-leak": killed.weekly_leak,
    "mode-switch": healthy.mode_switch,
    "daily-flush": healthy.daily_flush,
    "leak-fixed": healthy.leak_fixed,
    "flush-leak": killed.flush_leak,
    "quick-teeth": killed.quick_teeth,
    "quick-teeth-healthy": healthy.quick_teeth_healthy,
}


# What each class must show, as the replay tier's test ids say it.
PROPERTIES: dict[str, str] = {
    "limit-raised": "page-clears-within-minutes-of-a-raise",
    "limit-cut": "cut-tickets-and-pages-like-a-leak",
    "sawtooth": "one-page-when-the-peaks-are-about-to-cross",
    "sawtooth-healthy": "silent-on-released-teeth",
    "slow-leak-big-limit": "ticket-days-ahead-one-page-at-the-end",
    "jobs-beside-leak": "only-the-server-pages",
    "vllm-without-server": "no-meta-alert-without-a-listener",
    "crash-loop": "one-stream-of-pages-every-kill-reported",
    "ramp": "page-45min-ahead-15min-on-a-50min-ramp",
    "sidecar-socket-leak": "the-sidecar-pages",
    "two-vllm": "only-the-leaking-container-pages",
    "daily-swing": "silent",
    "warm-up": "silent-on-a-young-pod",
    "exporter-gaps": "gaps-and-rollouts-notify-once",
    "fast-ramp": "page-before-a-20min-ramp-kills",
    "nightly-plateau": "silent-on-nightly-batches",
    "weekly": "silent-on-a-weekly-pattern",
    "leak-restarted": "the-second-kill-is-ticketed-and-paged-too",
    "staircase": "a-young-pods-steps-page-before-the-last-one",
    "accelerating": "a-leak-that-speeds-up-pages-ahead",
    "pod-level-limit": "the-pod-level-cgroup-binds-and-pages",
    "saturating-kill": "a-cache-filling-past-its-limit-pages-from-the-noise-band",
    "growing-batch": "a-nightly-batch-that-grows-pages-before-the-night-it-crosses",
    "step-up": "no-page-on-a-reload-step",
    "saturating": "no-page-on-a-cache-filling-to-its-cap",
    "bursty-leak": "a-burst-on-a-leak-kills-paged-ahead",
    "bursty-healthy": "silent-on-bursts-of-traffic",
    "raised-then-leak": "a-raise-buys-days-then-one-page-before-the-kill",
    "jittered-sawtooth": "one-page-when-irregular-peaks-are-about-to-cross",
    "jittered-sawtooth-healthy": "silent-on-irregular-teeth-once-known",
    "late-leak": "a-leak-out-of-days-of-pattern-pages-ahead",
    "traffic-leak": "a-leak-that-grows-with-traffic-pages-ahead",
    "reload-then-leak": "the-leak-after-a-reload-step-pages-ahead",
    "noisy-flat": "silent-on-heavy-noise",
    "weekly-leak": "a-leak-under-a-weekly-pattern-pages-ahead",
    "mode-switch": "silent-on-two-working-sets-once-known",
    "daily-flush": "silent-on-a-cache-flushed-about-daily",
    "leak-fixed": "clears-within-the-hour-of-a-fix-in-place",
    "flush-leak": "one-page-as-the-fill-that-kills-is-about-to-cross",
    "quick-teeth": "one-page-when-quick-teeths-peaks-are-about-to-cross",
    "quick-teeth-healthy": "silent-on-quick-teeth",
}


def draw(cls: str, seed: int, variant: int = 0) -> Draw:
    """One draw of a class; the variant (0-2, see VARIANTS) sets the phase."""
    d = CLASSES[cls](random.Random(f"{cls}/{seed}"))
    name = f"{cls}-{seed}-{VARIANTS[variant]}"
    case = dataclasses.replace(d.case, name=name, phase_shifted=variant == 1)
    return dataclasses.replace(d, seed=seed, case=case)


def verdict(d: Draw, stats: dict[Key, Stat]) -> list[str]:
    """What is wrong with a replay of the draw (empty: every property holds)."""
    out = evaluate.problems(d.case, stats)
    # One incident per draw: its pager notifications, over every memory alert of a pod.
    per_pod: dict[str, int] = {}
    for (alert, severity, pod, _), st in stats.items():
        if severity == "critical" and alert.startswith("HeadroomMemory"):
            per_pod[pod] = per_pod.get(pod, 0) + st.episodes
    most = MAX_NOTIFICATIONS * d.incidents
    out += [f"{n} pager notifications for {pod} (at most {most})"
            for pod, n in sorted(per_pod.items()) if n > most]
    out += last_incident(d, stats)
    if d.first_kill_s is not None:
        page = next(k for k in d.case.expect if k[0] == FILL)
        first = stats.get(page)
        if first is not None and d.first_kill_s - first.first_s < d.first_kill_min_lead_s:
            out.append(f"first page {evaluate._hm(d.first_kill_s - first.first_s)} before "
                       f"the first kill (needs {evaluate._hm(d.first_kill_min_lead_s)})")
    return out


def last_incident(d: Draw, stats: dict[Key, Stat]) -> list[str]:
    """The last of several incidents: its page began within its lead window and its
    ticket notified without a break before the end (``Draw.last_page_lead_s``,
    ``Draw.ticket_held_s``)."""
    out: list[str] = []
    end, hm = d.case.end_s, evaluate._hm

    def fill(severity: str) -> Stat | None:
        # A silent class expects no FillingUp of that severity: nothing to look up.
        key = next((k for k in d.case.expect if k[0] == FILL and k[1] == severity), None)
        return stats.get(key) if key is not None else None

    paged = fill("critical")
    if d.last_page_lead_s is not None:
        least, most = d.last_page_lead_s
        lead = end - paged.latest_s if paged is not None else math.nan
        if not least <= lead <= most:
            out.append(f"the last page began {hm(lead) if lead == lead else 'never'} "
                       f"before the last kill (needs {hm(least)} to {hm(most)})")
    if d.ticket_held_s is not None:
        st = fill("warning")
        # Notifying to the end, or until the page mutes it (the shipped inhibition).
        until = end if paged is None else min(end, paged.latest_s)
        if st is None or end - st.latest_s < d.ticket_held_s \
                or st.last_s < until - d.case.evaluation_s:
            began = hm(end - st.latest_s) if st is not None else "never"
            out.append(f"the ticket's last episode began {began} before the last kill "
                       f"(needs {hm(d.ticket_held_s)}, notifying until the page)")
    return out


__all__ = ["CLASSES", "PROPERTIES", "VARIANTS", "Draw", "draw", "verdict"]
