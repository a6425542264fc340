"""What a drawn scenario class returns (``Draw``) and the pieces the classes build one
from: the thresholds they share, a one-container pod, and the expectations of a case that
ends in a kill or does not."""

from __future__ import annotations

import random
from dataclasses import dataclass

from exporter.promql import HOUR, MINUTE

from .recording import FILL, NEAR, RECLAIM, Case, Fn, Key, Recorder, cgroup, process, steady
from .shapes import first_at_or_above

GiB = 1024**3
MiB = 1024**2
PAGE_MIN_LEAD_S = 45 * MINUTE  # a pattern slower than that
FAST_PAGE_MIN_LEAD_S = 15 * MINUTE  # a 50-minute ramp
SLOW_PAGE_MAX_LEAD_S = 4 * HOUR  # "not more than a few hours before"
# A sample this many noise deviations from the limit is a near miss: an excursion that
# size (a 60 s scrape sees one about every 12 h) would have killed there.
NEAR_MISS_SIGMAS = 3
MAX_NOTIFICATIONS = 3  # per incident
# The rules are evaluated every minute (Prometheus's default), or at the scrape
# interval where scrapes are slower: the slowest supported evaluation interval is 120 s.
EVAL_S = 60
OOM = "HeadroomPodOOMKilled"
HIDDEN = "HeadroomHiddenMemoryGrowth"


@dataclass(frozen=True)
class Draw:
    cls: str
    seed: int
    case: Case
    params: dict[str, float]
    # The first kill of a crash loop (lead windows are read against it).
    first_kill_s: int | None = None
    first_kill_min_lead_s: int = 0
    # Incidents the replay holds (each may notify MAX_NOTIFICATIONS times).
    incidents: int = 1
    # The last incident of several: its page's last episode begins within (least, most)
    # seconds before the end; its ticket notifies without a break for at least
    # ``ticket_held_s`` before the end.
    last_page_lead_s: tuple[int, int] | None = None
    ticket_held_s: int | None = None

    @property
    def label(self) -> str:
        shown = ", ".join(f"{k}={v:.3g}" for k, v in self.params.items())
        return f"{self.cls} seed={self.seed} ({shown})"


def _k(alert: str, severity: str, pod: str, container: str = "vllm") -> Key:
    return (alert, severity, pod, container)


def _step(rng: random.Random, choices: tuple[int, ...] = (20, 30, 60, 90, 120)) -> int:
    return rng.choice(choices)


def _single(rec: Recorder, pod: str, limit: Fn, u: Fn, cache: float = 2 * GiB,
            events_max: Fn | None = None, oom_kill: Fn | None = None,
            engine: bool = True) -> None:
    """A one-container pod (the container's limit binds) and its pod-level cgroup, with
    an EngineCore process holding the growing anon memory."""
    cgroup(rec, pod, "vllm", limit, u, cache=lambda t: cache, events_max=events_max,
           oom_kill=oom_kill)
    cgroup(rec, pod, "", limit, lambda t: None if u(t) is None else (u(t) or 0.0) + 16 * MiB,
           cache=lambda t: cache)
    if engine:
        process(rec, pod, "vllm", "EngineCore",
                lambda t: None if u(t) is None else max(0.0, (u(t) or 0.0) - 3 * GiB),
                lambda t: None if u(t) is None else 2 * GiB)


def _pod_alerts(pod: str, containers: tuple[str, ...] = ("vllm",)) -> frozenset[Key]:
    """Every memory alert of the pod: allowed around a real kill."""
    return frozenset(_k(a, s, pod, x) for a in (FILL, NEAR, RECLAIM, HIDDEN)
                     for s in ("warning", "critical") for x in ("", *containers))


def _tickets(pod: str, container: str = "vllm") -> frozenset[Key]:
    """The pod's tickets, container and pod level: allowed where the growth so far
    honestly forecasts the limit though the pattern ends short of it."""
    return frozenset(_k(FILL, "warning", pod, x) for x in (container, ""))


def _killed(name: str, step: int, kill: int, rec: Recorder, pod: str, *,
            page_min: int, page_max: int, ticket_min: int | None = None,
            container: str = "vllm", allow: frozenset[Key] = frozenset(),
            **kw: object) -> Case:
    page = _k(FILL, "critical", pod, container)
    expect = {page}
    leads = {page: page_min}
    if ticket_min is not None:
        ticket = _k(FILL, "warning", pod, container)
        expect.add(ticket)
        leads[ticket] = ticket_min
    return Case(name, name, "", step, kill, dict(rec.out), killed=True,
                expect=frozenset(expect), allow=allow | _pod_alerts(pod, (container,)),
                min_lead_s=leads, max_page_lead_s=page_max,
                max_episodes=MAX_NOTIFICATIONS, eval_s=max(step, EVAL_S),
                **kw)  # type: ignore[arg-type]


def _healthy(name: str, step: int, end: int, rec: Recorder, **kw: object) -> Case:
    return Case(name, name, "", step, end, dict(rec.out), eval_s=max(step, EVAL_S),
                **kw)  # type: ignore[arg-type]


def noise_timed(page_max: int, u: Fn, limit: Fn, sigma: float, kill: int,
                step: int) -> int:
    """How early the page may come where the noise may decide the kill: ``page_max``
    before the first near miss (a recorded sample within ``NEAR_MISS_SIGMAS`` noise
    deviations of the limit in force). A slow leak spends hours in that band and its kill
    is the first excursion that crosses, which no forecast can time: a page at the first
    near miss is "act now", not early. Without a near miss before the kill, ``page_max``
    before the kill."""
    def near(t: int) -> float | None:
        lim = limit(t)
        return None if lim is None else lim - NEAR_MISS_SIGMAS * sigma

    try:
        return page_max + kill - first_at_or_above(u, near, range(0, kill, step))
    except ValueError:  # no near miss before the kill
        return page_max


def _noisy_kill(name: str, step: int, pod: str, limit: float, u: Fn,
                sigma: float, within_s: int, page_max: int = SLOW_PAGE_MAX_LEAD_S,
                reach: Fn | None = None) -> tuple[Case, int]:
    """One container under a fixed limit, killed where ``u`` first reaches it (within
    ``within_s``): paged at least PAGE_MIN_LEAD_S ahead, and not more than ``page_max``
    before the first near miss (the noise may decide the kill) of ``u``, or of ``reach``
    where chance decides which excursion kills (the highest a burst or a tooth can go)."""
    kill = first_at_or_above(u, lambda t: limit, range(0, within_s, step))
    rec = Recorder(range(0, kill + 1, step), steady())
    _single(rec, pod, lambda t: limit, u)
    case = _killed(name, step, kill, rec, pod, page_min=PAGE_MIN_LEAD_S,
                   page_max=noise_timed(page_max, reach or u, lambda t: limit, sigma,
                                        kill, step))
    return case, kill


def _zero_while(fn: Fn) -> Fn:
    return lambda t: None if fn(t) is None else 0.0


def _minus(fn: Fn, amount: float) -> Fn:
    return lambda t: None if fn(t) is None else (fn(t) or 0.0) - amount
