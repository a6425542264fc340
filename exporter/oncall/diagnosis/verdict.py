"""The diagnosis as data (the verdict, how close, what grows, the likely causes, the
kills, what to do) and the tunables the verdict is judged by."""

from __future__ import annotations

from dataclasses import dataclass

from exporter import catalog as c
from exporter.oncall.units import DAY, HOUR, MiB

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
FILE_KINDS = (c.KIND_FILE_ACTIVE, c.KIND_FILE_INACTIVE)
UNRECLAIMABLE_KINDS = (c.KIND_ANON, c.KIND_SHMEM, c.KIND_KERNEL, c.KIND_SOCK, c.KIND_UNACCOUNTED)
RUNBOOK_BASE = "https://github.com/vllm-headroom/headroom/blob/main/alerts/runbooks"


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
    # The forecast's PEAK_HEADROOM_SWINGS: the headroom above the peaks in quietest-hour
    # swings (where the memory has noise); below the noise band the page fires on it.
    peak_swings: float | None = None


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

