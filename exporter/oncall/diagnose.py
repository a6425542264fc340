"""Pure rules: the evidence fetched for one pod -> a diagnosis in plain words.

The model is the alerts' (``alerts/rules.py``): the kernel OOM-kills a cgroup when its
*unreclaimable* memory (anon, shmem, kernel) reaches its limit; page cache is always
reclaimed first. Growth that lasts is the rise of the daily floor (the lowest figure in
the last day against the day before), which diurnal load cannot fake; with less than two
days of history the slope over what there is stands in for it.

Nothing here does I/O: ``explain.py`` fetches an :class:`Evidence`, this module judges it,
and the renderers print the :class:`Diagnosis`.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.oncall.forecast import HORIZONS, Forecast, grower_text, growing, tightest

MiB = 1 << 20
GiB = 1 << 30
HOUR = 3600.0
DAY = 86400.0

HEALTHY, AT_RISK, NO_DATA = "healthy", "at_risk", "no_data"
EXIT_CODES = {HEALTHY: 0, AT_RISK: 1, NO_DATA: 3}

# Tunables of the verdict (the alerts' thresholds where they have one).
NEAR_LIMIT_RATIO = 0.90  # HeadroomMemoryFillingUp's critical also wants the pod this full
AT_RISK_HORIZON = 7 * DAY  # reaching the limit within a week at the lasting rate
PAGE_HORIZON = HOUR  # the critical FillingUp page's: a climb reaching the limit sooner
# is never "healthy", even one too fresh for the forecast's sustained windows
MIN_GROWTH_BYTES_PER_DAY = 32 * MiB  # below this (or 0.5% of the limit) a day: noise
MIN_GROWTH_LIMIT_RATIO = 0.005
MIN_STALE_SHM = 16 * MiB
LIMIT_MARGIN = 1.2  # a limit 20% above the unreclaimable peak leaves page cache room

VLLM_PROCESS_PREFIXES = ("EngineCore", "Worker", "APIServer", "DPCoordinator")
FILE_KINDS = ("file_active", "file_inactive")
UNRECLAIMABLE_KINDS = ("anon", "shmem", "kernel", "sock", "unaccounted")
RUNBOOK_BASE = "https://github.com/vllm-headroom/headroom/blob/main/alerts/runbooks"


# --- evidence ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trend:
    """One gauge: its value and its slopes (bytes/s) over 1 h, 6 h and 1 d; ``rise1d`` is
    the lowest value in the last day minus the lowest in the day before (bytes)."""

    now: float
    d1h: float | None = None
    d6h: float | None = None
    d1d: float | None = None
    rise1d: float | None = None

    def lasting(self) -> float | None:
        """Growth that lasts (bytes/s): the floor's rise when two days exist, else the
        slope over the longest window with data."""
        if self.rise1d is not None:
            return self.rise1d / DAY
        return next((d for d in (self.d1d, self.d6h, self.d1h) if d is not None), None)

    def __add__(self, other: Trend) -> Trend:
        return Trend(self.now + other.now, _add(self.d1h, other.d1h),
                     _add(self.d6h, other.d6h), _add(self.d1d, other.d1d),
                     _add(self.rise1d, other.rise1d))

    def __neg__(self) -> Trend:
        return Trend(-self.now, _neg(self.d1h), _neg(self.d6h), _neg(self.d1d),
                     _neg(self.rise1d))

    def __sub__(self, other: Trend) -> Trend:
        return self + (-other)


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _neg(a: float | None) -> float | None:
    return None if a is None else -a


def total(trends: Iterable[Trend]) -> Trend:
    out = Trend(0.0, 0.0, 0.0, 0.0, 0.0)
    for t in trends:
        out = out + t
    return out


@dataclass(frozen=True)
class CgroupEvidence:
    container: str  # "" = the pod-level cgroup
    limit: float
    unreclaimable: Trend
    usage: float | None = None
    working_set: float | None = None
    peak_unreclaimable_1d: float | None = None
    kinds: Mapping[str, Trend] = field(default_factory=dict)
    reclaim_per_s: float | None = None  # memory.events max (v1 failcnt) over 1 h


@dataclass(frozen=True)
class ProcessEvidence:
    container: str
    process: str
    anon: Trend | None = None  # rss_anon
    shmem: Trend | None = None  # rss_shmem (mapped shmem: /dev/shm maps, pinned memory)

    @property
    def held(self) -> Trend:
        return total(t for t in (self.anon, self.shmem) if t is not None)


@dataclass(frozen=True)
class TmpfsEvidence:
    container: str
    mount: str
    used: Trend
    size: float | None = None
    orphaned: Trend | None = None  # files no live process of the pod has open or mapped


@dataclass(frozen=True)
class KvEvidence:
    container: str
    medium: str
    capacity_bytes: float | None = None
    usage_ratio: float | None = None
    prefix_blocks: Trend | None = None


@dataclass(frozen=True)
class KillEvidence:
    container: str
    process: str
    total: float
    last_day: float
    exporter: str  # the exporter's instance (host:port) that counted them
    when: float | None = None  # the last kill (unix seconds), from the counter's history
    grew: str = ""  # what grew before it and how fast
    grew_rate: float | None = None  # B/s of that growth


@dataclass(frozen=True)
class Evidence:
    namespace: str
    pod: str
    at: float
    cgroups: tuple[CgroupEvidence, ...] = ()
    processes: tuple[ProcessEvidence, ...] = ()
    tmpfs: tuple[TmpfsEvidence, ...] = ()
    kv: tuple[KvEvidence, ...] = ()
    kills: tuple[KillEvidence, ...] = ()
    # The forecast contract's series for the pod's cgroups (recorded, or the local mirror
    # of the rules when they are not loaded); empty: judged from the trends alone.
    forecasts: tuple[Forecast, ...] = ()


# --- diagnosis -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Closeness:
    cgroup: str  # "container vllm" / "pod-level cgroup"
    container: str
    limit: float
    unreclaimable: float
    headroom: float
    ratio: float
    lasting_rate: float | None  # bytes/s
    time_to_limit_s: float | None
    trend_1h: float | None
    trend_6h: float | None
    trend_1d: float | None
    floor_rise_1d: float | None
    usage: float | None
    working_set: float | None
    reclaim_per_s: float | None
    horizon: str | None = None  # the forecast's horizon that gives time_to_limit_s
    source: str = "trends"  # recorded / local (the rules' mirror) / trends
    grower: str = ""  # the forecast's top grower: "EngineCore anon", "dev_shm, no process"
    # GROWTH per horizon (short, medium, lasting; B/s, present while > 0): the forecast's
    # own rates, shown instead of the raw trends when there is a forecast.
    by_horizon: tuple[tuple[str, float], ...] = ()




@dataclass(frozen=True)
class Growth:
    what: str  # grower (the forecast's top grower), kind, page_cache, process, no_owner,
    # tmpfs, orphaned
    name: str
    container: str
    now: float | None
    rate: float  # bytes/s
    detail: str = ""


@dataclass(frozen=True)
class Cause:
    code: str
    title: str
    detail: str
    settings: tuple[str, ...] = ()
    runbook: str | None = None


@dataclass(frozen=True)
class Kill:
    container: str
    process: str
    total: int
    last_day: int
    postmortem: str
    when: float | None = None
    age_s: float | None = None
    grew: str = ""


@dataclass(frozen=True)
class Diagnosis:
    namespace: str
    pod: str
    at: float
    verdict: str
    summary: str
    reasons: tuple[str, ...] = ()
    closeness: Closeness | None = None
    growth: tuple[Growth, ...] = ()
    causes: tuple[Cause, ...] = ()
    kills: tuple[Kill, ...] = ()
    actions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    headline: str = ""  # one line within 80 columns: verdict, pod, the one number
    commands: tuple[str, ...] = ()  # ready to paste, for this pod

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


# --- formatting (shared with the renderers) --------------------------------------------------
def printable(text: str, limit: int = 120) -> str:
    """A label value fit for a terminal: process and pod names are hostile input, and a
    name holding an escape sequence must not drive the engineer's terminal."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:limit])


def fmt_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{sign}{n / size:.1f} {unit}"
    return f"{sign}{n:.0f} B"


def fmt_rate(per_s: float | None) -> str:
    """A rate in the unit an engineer reads best: per day for slow leaks, per second for
    a ramp that kills within minutes."""
    if per_s is None:
        return "n/a"
    sign = "+" if per_s >= 0 else "-"
    a = abs(per_s)
    if a >= MiB:
        return f"{sign}{fmt_bytes(a)}/s"
    if a * HOUR >= GiB:
        return f"{sign}{fmt_bytes(a * HOUR)}/h"
    return f"{sign}{fmt_bytes(a * DAY)}/day"


def fmt_duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 2 * HOUR:
        return f"{s / 60:.0f} min"
    if s < 2 * DAY:
        return f"{s / HOUR:.1f} h"
    return f"{s / DAY:.1f} days"


def where(container: str) -> str:
    return f"container {container}" if container else "pod-level cgroup"


# --- the rules ---------------------------------------------------------------------------------
def growth_threshold(limit: float) -> float:
    """Bytes/s below which a slope is noise for a cgroup of this limit."""
    return max(MIN_GROWTH_BYTES_PER_DAY, MIN_GROWTH_LIMIT_RATIO * limit) / DAY


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
        by_horizon=tuple((h, f.growth[h]) for h in HORIZONS if h in f.growth))


def _rate_of(t: Trend | None, sustained: bool) -> float | None:
    if t is None:
        return None
    return t.lasting() if sustained else (t.d1h if t.d1h is not None else t.lasting())


def _in_scope(container: str, binding: str) -> bool:
    """The pod-level cgroup holds every container's charges."""
    return binding == "" or container == binding


def _growth(ev: Evidence, cg: CgroupEvidence, sustained: bool, thr: float) -> list[Growth]:
    out: list[Growth] = []
    for kind in UNRECLAIMABLE_KINDS:
        t = cg.kinds.get(kind)
        r = _rate_of(t, sustained)
        if t is not None and r is not None and r > thr:
            out.append(Growth("kind", kind, cg.container, t.now, r))
    files = [cg.kinds[k] for k in FILE_KINDS if k in cg.kinds]
    u_rate = _rate_of(cg.unreclaimable, sustained) or 0.0
    if files:
        f = total(files)
        r = _rate_of(f, sustained)
        if r is not None and r < -thr and u_rate > thr:
            out.append(Growth("page_cache", "page cache squeezed out", cg.container, f.now,
                              r, "the kernel reclaims it to make room: the working set "
                              "stays flat while unreclaimable memory grows"))
        elif r is not None and r > thr:
            out.append(Growth("page_cache", "page cache (reclaimable)", cg.container, f.now,
                              r, "the kernel takes it back before any OOM kill"))
    procs = [p for p in ev.processes if _in_scope(p.container, cg.container)]
    for p in procs:
        r = _rate_of(p.held, sustained)
        if r is not None and r > thr:
            parts = [f"{name} {fmt_rate(_rate_of(t, sustained))}"
                     for name, t in (("anon", p.anon), ("shmem", p.shmem)) if t is not None]
            out.append(Growth("process", p.process, p.container, p.held.now, r,
                              ", ".join(parts)))
    if procs or cg.kinds:
        hidden = cg.unreclaimable - total(p.held for p in procs)
        r = _rate_of(hidden, sustained)
        if r is not None and r > thr:
            out.append(Growth("no_owner", "memory no process owns", cg.container,
                              max(0.0, hidden.now), r,
                              "unmapped /dev/shm files, kernel memory, charges left by "
                              "dead processes"))
    for tf in ev.tmpfs:
        # tmpfs series are pod-level (the pod's /dev/shm, whichever container wrote it).
        r = _rate_of(tf.used, sustained)
        if r is not None and r > thr:
            out.append(Growth("tmpfs", tf.mount, tf.container, tf.used.now, r))
        r = _rate_of(tf.orphaned, sustained)
        if tf.orphaned is not None and r is not None and r > thr:
            out.append(Growth("orphaned", f"{tf.mount} files no process holds",
                              tf.container, tf.orphaned.now, r))
    return sorted(out, key=lambda g: (g.what == "page_cache", -g.rate))


def _is_vllm(process: str) -> bool:
    return process.startswith(VLLM_PROCESS_PREFIXES)


def _runbook(base: str, alert: str) -> str:
    return f"{base.rstrip('/')}/{alert}.md"


def _causes(ev: Evidence, cg: CgroupEvidence, close: Closeness, growth: list[Growth],
            sustained: bool, thr: float, base: str) -> list[Cause]:
    # (weight, cause): the weight is the growth the cause explains (bytes/s); causes are
    # ranked by it, and one explaining under a fifth of the growth is dropped (a step in
    # /dev/shm beside an anon ramp is not the story). Causes that kill without growth
    # (a KV tier that cannot fit) weigh infinitely; stale files are kept at any rate.
    causes: list[tuple[float, Cause]] = []
    u_rate = _rate_of(cg.unreclaimable, sustained) or 0.0

    def rate(t: Trend | None) -> float:
        return max(0.0, _rate_of(t, sustained) or 0.0)
    grows = {(g.what, g.name) for g in growth}
    shmem_grows = ("kind", "shmem") in grows
    tmpfs = list(ev.tmpfs)  # pod-level series: the pod's mounts, shared by its containers
    kv_cpu = [k for k in ev.kv if k.medium == "cpu" and k.capacity_bytes
              and _in_scope(k.container, cg.container)]

    stale = [t for t in tmpfs if t.orphaned is not None and t.orphaned.now >= MIN_STALE_SHM]
    for t in stale:
        assert t.orphaned is not None
        causes.append((max(rate(t.orphaned), 1.0), Cause(
            "stale_shm", f"files left in {t.mount} by a dead process",
            f"{fmt_bytes(t.orphaned.now)} of {t.mount} belongs to files no live process of "
            f"the pod has open or mapped (a killed container's message queues, "
            f"multimodal cache or KV-offload region). They stay charged to the pod: a "
            f"container restart keeps the pod's {t.mount}.",
            (), _runbook(base, "HeadroomStaleSharedMemory"))))

    for k in kv_cpu:
        assert k.capacity_bytes is not None
        pending = k.capacity_bytes * (1 - min(1.0, max(0.0, k.usage_ratio or 0.0)))
        shm_rate = max((_rate_of(t.used, sustained) or 0.0) for t in tmpfs) if tmpfs else 0.0
        worker_shm = any(_is_vllm(p.process) and (_rate_of(p.shmem, sustained) or 0) > thr
                         for p in ev.processes if _in_scope(p.container, cg.container))
        wont_fit = pending > close.headroom
        if wont_fit or shmem_grows or shm_rate > thr or worker_shm:
            use = f"{(k.usage_ratio or 0) * 100:.0f}%" if k.usage_ratio is not None else "?"
            weight = math.inf if wont_fit else max(shm_rate, rate(cg.kinds.get("shmem")))
            causes.append((weight, Cause(
                "kv_offload", "vLLM's CPU KV-offload tier fills",
                f"the CPU KV-offload tier holds {fmt_bytes(k.capacity_bytes)} "
                f"({use} in use; /dev/shm/vllm_offload_*.mmap); "
                f"{fmt_bytes(pending)} still to fill against {fmt_bytes(close.headroom)} of "
                "headroom" + (": the pod is killed when the tier fills, however slowly"
                              if wont_fit else "") + ". Where the tier is pinned host "
                "memory, torch's allocator rounds each buffer up to a power of two: host "
                "memory can reach up to twice the size set.",
                ("--kv-offloading-size",), _runbook(base, "HeadroomKVOffloadWillNotFit"))))

    shm_mounts = [t for t in tmpfs if (_rate_of(t.used, sustained) or 0.0) > thr]
    live_shm = [t for t in shm_mounts if t.orphaned is None
                or (_rate_of(t.orphaned, sustained) or 0.0) <= thr]
    if live_shm and not kv_cpu and not stale:
        causes.append((rate(live_shm[0].used), Cause(
            "mm_shm_cache", "shared memory in /dev/shm grows (multimodal cache?)",
            f"{', '.join(t.mount for t in live_shm)} grows "
            f"{fmt_rate(_rate_of(live_shm[0].used, sustained))} while its files are held by "
            "live processes. vLLM's multimodal processor cache of type shm lives there, one "
            "per API server and engine: mm_processor_cache_gb x (api_server_count + "
            "data_parallel_size) in all.",
            ("--mm-processor-cache-gb", "--mm-processor-cache-type",
             "VLLM_MM_INPUT_CACHE_GIB (older vLLM)"),
            _runbook(base, "HeadroomSharedMemoryFillingUp"))))

    procs = [g for g in growth if g.what == "process"]
    by_name = {(p.container, p.process): p for p in ev.processes}
    for g in procs[:2]:
        p = by_name[(g.container, g.name)]
        anon_r = _rate_of(p.anon, sustained) or 0.0
        shm_r = _rate_of(p.shmem, sustained) or 0.0
        if shm_r > thr and shm_r >= anon_r and not shm_mounts and not kv_cpu:
            causes.append((shm_r, Cause(
                "pinned_host", f"{g.name} maps more and more shared memory (pinned host "
                "memory?)",
                f"{g.name} grows {fmt_rate(shm_r)} of mapped shmem with no tmpfs growing: "
                "CUDA pinned host memory is counted as shmem, and torch rounds pinned "
                "buffers up to a power of two (up to 1.9x what was asked).",
                ("--kv-offloading-size", "--cpu-offload-gb"),
                _runbook(base, "HeadroomMemoryFillingUp"))))
        elif anon_r > thr:
            speed = "slow " if anon_r * DAY < 24 * GiB else ""
            title = (f"{speed}anon leak in vLLM's {g.name}" if _is_vllm(g.name)
                     else f"{speed}anon leak in {g.name} (not a vLLM process)")
            prefix = [k for k in ev.kv if k.prefix_blocks is not None
                      and (_rate_of(k.prefix_blocks, sustained) or 0.0) > 0]
            settings: tuple[str, ...] = ("--enable-prefix-caching",) if prefix else ()
            causes.append((anon_r, Cause(
                "anon_leak", title,
                f"{g.name} ({where(g.container)}) grows {fmt_rate(anon_r)} of private "
                "memory and does not give it back" + (
                    "; prefix-cache entries grow with it" if prefix else
                    ". No vLLM setting bounds it: plan restarts before the limit and "
                    "report it upstream with the vLLM version" if _is_vllm(g.name) else ""
                ) + ".", settings, _runbook(base, "HeadroomMemoryFillingUp"))))

    if ("kind", "kernel") in grows:
        causes.append((rate(cg.kinds.get("kernel")), Cause(
            "kernel", "kernel memory grows",
            "socket buffers, page tables or slab the kernel cannot free",
            (), _runbook(base, "HeadroomHiddenMemoryGrowth"))))
    hidden = [g.rate for g in growth if g.what == "no_owner"]
    if hidden and not causes:
        causes.append((hidden[0], Cause(
            "no_owner", "memory no process owns grows",
            "unmapped files in /dev/shm or an emptyDir of medium Memory, or kernel "
            "memory; `ls -la /dev/shm` in the pod shows the files",
            (), _runbook(base, "HeadroomHiddenMemoryGrowth"))))
    floor = 0.2 * u_rate if u_rate > thr else 0.0
    ranked = sorted(causes, key=lambda wc: -wc[0])
    return [c for w, c in ranked if w >= floor or c.code == "stale_shm"]


def _suggested_limit(peak: float) -> float:
    step = GiB if peak >= 8 * GiB else 64 * MiB
    return math.ceil(peak * LIMIT_MARGIN / step) * step


def _limit_advice(cg: CgroupEvidence, close: Closeness, killed: bool = False,
                  grew_rate: float | None = None) -> str:
    """The limit that holds the observed peak (and, while it grows, a planning horizon
    of growth): a stopgap, said as one when growth is what kills. After a kill the peak
    is the old limit's (the kernel capped it), so it sizes nothing: the growth does."""
    if killed:
        rate = grew_rate if grew_rate and grew_rate > 0 else close.lasting_rate
        head = (f"the peak before the kill is the {fmt_bytes(cg.limit)} limit itself "
                "(the kernel capped it): it does not say what the pod needs")
        if not rate or rate <= 0:
            return head + "; size the limit from a run without kills"
        day = cg.limit + rate * DAY
        if day > 4 * cg.limit:
            return (head + f"; at {fmt_rate(rate)} no limit holds a day of it: fix the "
                    "growth (restart before the limit meanwhile)")
        return (head + f"; a limit of {fmt_bytes(_suggested_limit(day))} holds one day "
                f"of growth at {fmt_rate(rate)}: a stopgap, the growth must be fixed")
    peak = max(cg.peak_unreclaimable_1d or 0.0, close.unreclaimable)
    growing = close.lasting_rate is not None and close.time_to_limit_s is not None
    need = peak + (close.lasting_rate or 0.0) * AT_RISK_HORIZON if growing else peak
    if growing and need > 4 * cg.limit:  # a climb of MiB/s: no limit holds a week of it
        return (f"at {fmt_rate(close.lasting_rate)} no limit holds "
                f"{fmt_duration(AT_RISK_HORIZON)} of this growth: fix the growth (restart "
                "before the limit meanwhile)")
    limit = _suggested_limit(need)
    what = (f"the last day's unreclaimable peak ({fmt_bytes(peak)})" if not growing else
            f"the peak ({fmt_bytes(peak)}) plus {fmt_duration(AT_RISK_HORIZON)} of growth "
            f"at {fmt_rate(close.lasting_rate)}")
    if limit <= cg.limit and not growing:
        return (f"the {fmt_bytes(cg.limit)} limit holds {what} with "
                f"{LIMIT_MARGIN - 1:.0%} for page cache")
    line = (f"a limit of {fmt_bytes(limit)} (now {fmt_bytes(cg.limit)}) holds {what} "
            f"with {LIMIT_MARGIN - 1:.0%} for page cache")
    if growing:
        line += ": a stopgap, the growth itself must be fixed"
    return line


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
    growth = _growth(ev, cg, sustained, thr)
    causes = _causes(ev, cg, close, growth, sustained, thr, runbook_base)
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
    fg = _forecast_grower(ev, cg.container)
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
    shown = _forecast_growth(ev, cg, thr, growth) if ev.forecasts and climb is None \
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
    runbooks = list(dict.fromkeys([_runbook(runbook_base, a) for a in alerts]
                                  + [c.runbook for c in causes if c.runbook]))
    if verdict == AT_RISK or causes:
        for c in causes:
            if c.settings:
                actions.append(f"{c.title}: check {', '.join(c.settings)}")
        actions.append(_limit_advice(cg, close, killed_recently, grew_rate))
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
                     "from the raw series (the rules' definition, exporter/oncall/forecast.py)")
    return Diagnosis(ev.namespace, ev.pod, ev.at, verdict, summary, tuple(reasons), close,
                     tuple(shown), tuple(causes), kills, tuple(actions), tuple(notes),
                     headline, commands)


HORIZON_WORDS = {"short": "climbing for minutes", "medium": "climbing for hours",
                 "lasting": "growth over days"}


KIND_NAMES = {"dev_shm": "/dev/shm", "hidden": "memory no process owns"}


def _forecast_growth(ev: Evidence, cg: CgroupEvidence, thr: float,
                     lasting: Sequence[Growth]) -> list[Growth]:
    """What grows in the binding cgroup, from the forecast's series: the top grower
    first (TOP_GROWER: the process and kind the page names, at its rate). When a kill is
    forecast (a page can be out), then each kind and process growing faster than noise
    (KIND_GROWTH, PROCESS_GROWTH: the page's last hour) and the pod's /dev/shm, flat or
    not (the page's "; /dev/shm flat"); otherwise ``lasting``, the growth that lasts (a
    daily swing's hour is no growth)."""
    f = next((f for f in ev.forecasts if f.container == cg.container), None)
    if f is None:
        return list(lasting)
    procs = {p.process: p.held.now for p in ev.processes
             if _in_scope(p.container, cg.container)}
    where_of = {p.process: p.container for p in ev.processes
                if _in_scope(p.container, cg.container)}
    kinds_now: dict[str, float | None] = {k: t.now for k, t in cg.kinds.items()}
    shm = [t for t in ev.tmpfs if t.mount == "/dev/shm"]
    kinds_now["dev_shm"] = sum(t.used.now for t in shm) if shm else None
    kinds_now["hidden"] = (max(0.0, cg.unreclaimable.now - sum(procs.values()))
                           if procs else None)
    out: list[Growth] = []
    g = growing(f.grower)
    if g is not None:
        now = procs.get(g.process) if g.process else kinds_now.get(g.kind)
        out.append(Growth("grower", printable(grower_text(g), 60),
                          where_of.get(g.process, cg.container), now, g.rate,
                          "the top grower, as the page names it"))
    if f.time_to_limit is None:
        return out + list(lasting)
    for kind, r in sorted(f.kind_growth.items(), key=lambda kv: -kv[1]):
        if r > thr and kind != "dev_shm":
            # Memory no process owns is not a kind of the cgroup's own (as in the trends).
            out.append(Growth("no_owner" if kind == "hidden" else "kind",
                              KIND_NAMES.get(kind, kind), cg.container,
                              kinds_now.get(kind), r))
    for name, r in sorted(f.process_growth.items(), key=lambda kv: -kv[1]):
        if r > thr:
            out.append(Growth("process", printable(name, 60), where_of.get(name, ""),
                              procs.get(name), r))
    pod = next((p for p in ev.forecasts if p.container == ""), None)
    shm_rate = pod.kind_growth.get("dev_shm") if pod is not None else None
    if shm_rate is not None:
        out.append(Growth("tmpfs", "/dev/shm", "", kinds_now["dev_shm"], shm_rate,
                          "flat" if shm_rate <= SHM_FLAT_BPS else ""))
    return out


SHM_FLAT_BPS = float(MiB) / DAY  # the page's "/dev/shm flat": under 1 MiB/day


def _forecast_grower(ev: Evidence, container: str) -> str:
    f = next((f for f in ev.forecasts if f.container == container and growing(f.grower)),
             None)
    return printable(grower_text(f.grower), 60) if f is not None else ""


def fit(text: str, width: int = 80) -> str:
    """Cut in the middle: the end of a pod name (its replica hash) tells pods apart."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep * 2 // 3] + "…" + text[len(text) - keep * 2 // 3:]


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
