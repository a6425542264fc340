"""Recording-rule names, what each records, and the alert names: a contract.

Dashboards, the on-call tools and the rules read these names, never a typed
``headroom:...`` string, so a recording rule cannot be renamed under a panel.
Names say what a series is, not the window it was computed over (windows are
configurable): ``..:slope_short`` stays true where ``..:deriv5m`` would lie.
"""

from __future__ import annotations

from exporter import catalog as c

# --- recording-rule names ------------------------------------------------------------------
# Per workload (namespace, pod, container; the pod-level cgroup has container=""), unless
# said otherwise. Values in base units: bytes, bytes per second, seconds, ratios.
# The forecast contract (README "The forecast (recorded series)"): LIMIT, UNRECLAIMABLE,
# HEADROOM, BINDING, GROWTH, PEAK_ENVELOPE, TIME_TO_LIMIT, TOP_GROWER. Alerts read those
# (and TIME_TO_LIMIT_BY_HORIZON, the per-horizon figures TIME_TO_LIMIT is the soonest of).
LIMIT = "headroom:memory_limit:bytes"
UNRECLAIMABLE = "headroom:memory_unreclaimable:bytes"
WORKING_SET = "headroom:memory_working_set:bytes"
UNRECLAIMABLE_RATIO = "headroom:memory_unreclaimable:ratio"
HEADROOM = "headroom:memory_headroom:bytes"
PEAK_HEADROOM = "headroom:memory_peak_headroom:bytes"
LASTING_HEADROOM = "headroom:memory_lasting_headroom:bytes"
BINDING = "headroom:memory_binding:bool"
SLOPE_SHORT = "headroom:memory_unreclaimable:slope_short"
SLOPE_MEDIUM = "headroom:memory_unreclaimable:slope_medium"
GROWTH = "headroom:memory_growth:rate"  # label horizon: short, medium, lasting
TIME_TO_LIMIT_BY_HORIZON = "headroom:memory_time_to_limit_by_horizon:seconds"
CLIMB_BEYOND_PATTERN = "headroom:memory_climb_beyond_pattern:bool"
TIME_TO_LIMIT = "headroom:memory_time_to_limit:seconds"  # label horizon: the one that binds
ENVELOPE_TIME_TO_LIMIT = "headroom:memory_envelope_time_to_limit:seconds"
PEAK_HEADROOM_SWINGS = "headroom:memory_peak_headroom:swings"
PATTERN_CLEAR = "headroom:memory_pattern_clear:bool"  # label within: 1h, 2h, 3h, 6h
TMPFS_USED = "headroom:tmpfs_used:bytes"  # per workload and mount
TMPFS_SIZE = "headroom:tmpfs_size:bytes"  # per workload and mount
KV_OFFLOAD_PENDING = "headroom:vllm_kv_offload_pending:bytes"
NODE_AVAILABLE = "headroom:node_memory_available:bytes"  # per node
VLLM_UP = "headroom:vllm_up:ratio"
# The lasting group (evaluated every Config.lasting_interval_s).
PROCESS_MEMORY = "headroom:process_memory:bytes"  # per workload and process
PROCESS_ATTRIBUTED = "headroom:process_memory_attributed:bytes"
MEMORY_KIND = "headroom:memory_kind:bytes"  # per workload and kind
HIDDEN = "headroom:memory_hidden:bytes"
HOURLY_MAX = "headroom:memory_unreclaimable:hourly_max"
HOURLY_MIN = "headroom:memory_unreclaimable:hourly_min"
SETTLED_HOURLY_MIN = "headroom:memory_unreclaimable:settled_hourly_min"
FLOOR_COVER = "headroom:memory_floor_cover:seconds"
OOM_KILLED = "headroom:memory_oom_killed:bool"  # per pod
WORKING_SET_HOURLY_MIN = "headroom:memory_working_set:hourly_min"
HIDDEN_HOURLY_MIN = "headroom:memory_hidden:hourly_min"
UNRECLAIMABLE_BASELINE = "headroom:memory_unreclaimable:baseline"
WHOLE_BASELINE = "headroom:memory_unreclaimable:whole_baseline"
FALLEN_FLOOR = "headroom:memory_unreclaimable:fallen_floor"
UNRECLAIMABLE_BASELINE_RISE = "headroom:memory_unreclaimable:baseline_rise"
PEAK_ENVELOPE = "headroom:memory_peak_envelope:bytes"
PEAK_LEVEL = "headroom:memory_peak_level:bytes"
PEAK_CARRIED = "headroom:memory_peak_envelope:carried"
PEAK_ENVELOPE_RISE = "headroom:memory_peak_envelope:rise"
HOURLY_RANGE = "headroom:memory_unreclaimable:hourly_range"
HOURLY_NOISE = "headroom:memory_unreclaimable:hourly_noise"
QUIET_SWING = "headroom:memory_unreclaimable:quiet_swing"
PATTERN_SIGN = "headroom:memory_pattern_sign:bool"  # label sign: release, quiet
PATTERN_KNOWN = "headroom:memory_pattern_known:bool"
RELEASED = "headroom:memory_released:bool"
SHARP_RELEASE = "headroom:memory_sharp_release:bool"  # 0 or 1, every cgroup
TEETH = "headroom:memory_teeth:bool"
TEETH_PERIOD = "headroom:memory_teeth_period:seconds"
RELEASE_BASE = "headroom:memory_release:base"
RELEASE_FALL = "headroom:memory_release:fall"
TOOTH_SPREAD = "headroom:memory_tooth_spread:bytes"
TOOTH_CREST = "headroom:memory_tooth_crest:bytes"
PATTERN_CEILING = "headroom:memory_pattern_ceiling:bytes"
PATTERN_LIFT = "headroom:memory_pattern_lift:bytes"
PATTERN_PEAK = "headroom:memory_pattern_peak:bytes"  # label within: the hours ahead
PATTERN_RISE = "headroom:memory_pattern_rise:bytes"
PATTERN_HOLDS = "headroom:memory_pattern_holds:bool"
ABOVE_PATTERN = "headroom:memory_above_pattern:bool"
GREW = "headroom:memory_grew:bool"
GREW_LATELY = "headroom:memory_grew_lately:bool"
WORKING_SET_BASELINE = "headroom:memory_working_set:baseline"
HIDDEN_BASELINE = "headroom:memory_hidden:baseline"
HIDDEN_BASELINE_RISE = "headroom:memory_hidden:baseline_rise"
KIND_GROWTH = "headroom:memory_kind_growth:rate"  # per workload and kind
PROCESS_GROWTH = "headroom:process_memory_growth:rate"  # per workload and process
KIND_LASTING_GROWTH = "headroom:memory_kind_lasting_growth:rate"  # per workload and kind
PROCESS_LASTING_GROWTH = "headroom:process_memory_lasting_growth:rate"
TOP_GROWER = "headroom:memory_top_grower:rate"  # labels kind, process
VLLM_ANSWERED = "headroom:vllm_answered:bool"
VLLM_ANSWERED_LATELY = "headroom:vllm_answered_lately:bool"
TMPFS_PREDICTED = "headroom:tmpfs_used:predicted"  # per workload and mount
# The floor memory group (evaluated every Config.floor_memory_interval_s).
HIGHEST_FLOOR = "headroom:memory_unreclaimable:highest_floor"
HIGHEST_FLOOR_SINCE = "headroom:memory_unreclaimable:highest_floor_timestamp_seconds"
FLOOR_RISE_PAST_FALL = "headroom:memory_unreclaimable:baseline_rise_past_fall"
HIGHEST_ENVELOPE = "headroom:memory_peak_envelope:highest"
HIGHEST_ENVELOPE_SINCE = "headroom:memory_peak_envelope:highest_timestamp_seconds"
KIND_PEAK_GROWTH = "headroom:memory_kind_peak_growth:rate"  # per workload and kind
PROCESS_PEAK_GROWTH = "headroom:process_memory_peak_growth:rate"
# Compatibility: the alert owner of earlier releases is the binding cgroup.
OWNER = BINDING

HORIZONS: tuple[str, ...] = ("short", "medium", "lasting")
# The kind label of MEMORY_KIND and the growth series: the catalogue's unreclaimable kinds
# (kernel folds socket buffers in) plus two the rules derive: dev_shm (memory-backed tmpfs
# files) and hidden (memory no process accounts for).
KIND_DEV_SHM = "dev_shm"
KIND_HIDDEN = "hidden"
KINDS: tuple[str, ...] = (c.KIND_ANON, c.KIND_SHMEM, KIND_DEV_SHM, c.KIND_KERNEL, KIND_HIDDEN)

# Name -> meaning, in evaluation order (later rules read earlier ones), per group.
FAST_RECORDING_RULE_HELP: dict[str, str] = {
    LIMIT: "effective hard limit in force now (absent when 0: a limit of 0 never divides)",
    UNRECLAIMABLE: "memory the kernel cannot reclaim without swap (anon, shmem, kernel): "
    "the figure that OOMs",
    WORKING_SET: "usage - inactive_file: the kubelet's working set, for comparison",
    UNRECLAIMABLE_RATIO: "unreclaimable / the limit in force now",
    HEADROOM: "limit now - unreclaimable: what can still be charged once page cache is gone",
    PEAK_HEADROOM: "limit now - the highest unreclaimable figure over the peak window "
    "(at least 0): what the short and medium horizons divide by their rate and "
    "NearLimit compares with the hour's swing (read five times a minute, recorded once)",
    LASTING_HEADROOM: "limit now - the higher of the peaks' envelope and the recent peak "
    "(at least 0), where lasting growth is seen: what the lasting horizon's time to limit "
    "counts down, and, over it, the pace at which the page's noise band nears",
    BINDING: "1 on the cgroup whose limit binds: a container whose headroom is no more "
    "than the pod cgroup's plus a tolerance (its own limit comes first), the pod-level "
    "cgroup when one of its containers has no such limit; 0 on the others",
    SLOPE_SHORT: "deriv of unreclaimable over the short window (bytes/s)",
    SLOPE_MEDIUM: "deriv of unreclaimable over the medium window (bytes/s)",
    GROWTH: "growth estimate per horizon (bytes/s, present only while > 0): short and "
    "medium = the slowest slope over their sustain window once the series spans it "
    "while the figure still makes new highs (short: now above the minutes before by "
    "half the quiet hours' swing; medium: the last 15 min's highest above the 15 min "
    "before's by an eighth of it); "
    "lasting = the rise per day of both the floor and the envelope of the peaks (the "
    "smaller), from hourly minima and maxima, or of the peaks alone where they rose two "
    "days running (each by more than the minimum) and above every peak of the week "
    "before (HIGHEST_ENVELOPE) by half that rise; that rise, or the rise above the "
    "week's highest over its age (HIGHEST_ENVELOPE_SINCE) where that is less",
    TIME_TO_LIMIT_BY_HORIZON: "seconds until the limit in force now, per horizon: short "
    "and medium from the recent peak; lasting the sooner of the peaks' envelope at the "
    "lasting rate and the daily pattern (the first hours-ahead window whose pattern peak "
    "reaches the limit: 1, 2, 3 or 6 h)",
    CLIMB_BEYOND_PATTERN: "1 where the climb now goes beyond what the recurring peaks "
    "explain: above their envelope by a margin and a day of their lasting trend (or by "
    "fill_beyond_trend_s of it while the lasting horizon reaches the limit within a "
    "day, or by anything where the last hour rose above its daily pattern by more than "
    "that trend: ABOVE_PATTERN), or no envelope yet (a young series); absent otherwise",
    TIME_TO_LIMIT: "the soonest forecast that counts, one series per cgroup: short and "
    "medium only where the climb goes beyond the pattern, lasting always; label horizon "
    "says which binds. The page reads this",
    ENVELOPE_TIME_TO_LIMIT: "seconds until the envelope of the peaks carried on by the "
    "lasting trend (PEAK_CARRIED) reaches the limit in force now at the lasting rate: "
    "the peaks' own forecast, which a tooth climbing now does not move; present only "
    "with lasting growth",
    PEAK_HEADROOM_SWINGS: "the headroom above the peaks (their envelope, or the last "
    "hour's highest figure above it) in quiet-hour swings (QUIET_SWING), where the "
    "memory has noise: below half a swing the next excursion like the quietest "
    "hour's reaches the limit (the page's noise band, growing or not)",
    PATTERN_CLEAR: "1 (per window ahead, label within) where the daily pattern holds "
    "(PATTERN_HOLDS) and its peak over those hours (PATTERN_PEAK) stays below the limit "
    "in force now by the peaks' margin: there the envelope's straight lines neither "
    "start the page (the window that covers their horizon) nor keep it on (the "
    "longest window). Recorded once a minute so the page reads the limit once",
    TMPFS_USED: "bytes used in each memory-backed tmpfs of the pod (per mount)",
    TMPFS_SIZE: "size of each memory-backed tmpfs of the pod (per mount)",
    KV_OFFLOAD_PENDING: "part of vLLM's CPU KV-offload tier not yet in use: "
    "capacity * (1 - usage), or the whole capacity when vLLM reports no usage",
    NODE_AVAILABLE: "MemAvailable of the node (per node_labels)",
    VLLM_UP: "fraction of scrapes over the vLLM scrape window that read the pod's vLLM "
    "/metrics",
}
LASTING_RECORDING_RULE_HELP: dict[str, str] = {
    PROCESS_MEMORY: "anon + mapped shmem per process name (PSS where present, else RSS)",
    PROCESS_ATTRIBUTED: "anon + mapped shmem the container's processes account for",
    MEMORY_KIND: "unreclaimable memory per kind: anon, shmem (not in a tmpfs), dev_shm "
    "(memory-backed tmpfs files), kernel (kernel + socket buffers)",
    HIDDEN: "unreclaimable memory no process accounts for (unmapped /dev/shm files, "
    "kernel memory, charges left by dead containers)",
    HOURLY_MAX: "highest unreclaimable figure over the last hour",
    HOURLY_MIN: "lowest unreclaimable figure over the last hour",
    SETTLED_HOURLY_MIN: "HOURLY_MIN once the workload is past its first 45 minutes (a "
    "model's loading minutes are no floor): what the floor is made of",
    FLOOR_COVER: "how much of the envelope window before the last the settled floor "
    "covers (seconds, a window at most): what a workload younger than two windows has "
    "lived of it, past its warm-up",
    WORKING_SET_HOURLY_MIN: "lowest working set over the last hour",
    HIDDEN_HOURLY_MIN: "lowest hidden memory over the last hour",
    UNRECLAIMABLE_BASELINE: "the floor: lowest unreclaimable figure over the envelope "
    "window (from the settled hourly minima)",
    WHOLE_BASELINE: "UNRECLAIMABLE_BASELINE where the workload lived most of its "
    "envelope window past its warm-up (a settled hourly minimum 22 h ago): a young "
    "pod's first hours, whose lowest figure was no trough yet, are no floor for "
    "HIGHEST_FLOOR to remember",
    PEAK_ENVELOPE: "the level the recurring peaks reach: the highest hourly maximum over "
    "the envelope window before the last hour",
    PEAK_LEVEL: "the higher of PEAK_ENVELOPE and the last hour's highest figure: what "
    "PEAK_HEADROOM_SWINGS measures from (recorded once a round, read once a minute)",
    OOM_KILLED: "1 per pod where an OOM kill was counted since the last evaluation of "
    "the group (the watcher's or the kernel's counter): the floors before a kill are no "
    "pattern for UNRECLAIMABLE_BASELINE_RISE",
    UNRECLAIMABLE_BASELINE_RISE: "the floor now minus the higher of the floor one window "
    "earlier and HIGHEST_FLOOR where the peaks still reach it and no kill came since "
    "(bytes per window: from HIGHEST_FLOOR, the rise over its age, HIGHEST_FLOOR_SINCE, "
    "scaled to a window; FLOOR_RISE_PAST_FALL where that is less; from a workload "
    "younger than two windows, the rise over the part "
    "of the earlier window it lived, scaled to a window; none under "
    "Config.lasting_min_cover_s of it)",
    PEAK_ENVELOPE_RISE: "the envelope now minus the envelope one window earlier",
    HOURLY_RANGE: "the last hour's highest minus lowest unreclaimable figure: the "
    "memory's own recent swing",
    PATTERN_RISE: "how far the last hour's highest figure rose above the hours the "
    "daily pattern read for it one period ago (the one-hour PATTERN_PEAK's window, "
    "without its growth): what the pattern missed, plus a period of lasting growth",
    HOURLY_NOISE: "the last hour's noise as a swing: four standard deviations of its "
    "figures from their least-squares line (stddev^2 less deriv^2 * T^2 / 12): what a "
    "steady climb (a leak, a sawtooth's tooth) does not explain",
    QUIET_SWING: "the lower quartile of the hourly noise over the envelope window: the "
    "swing of the memory's quiet hours (a peak that close to the limit is one excursion "
    "from the kill)",
    PATTERN_SIGN: "1 where the figure shows what its pattern is (label sign): "
    "release, the last hour fell below the envelope of the peaks by more than the "
    "pattern swing (a flush, a batch's end, a daily trough); quiet, a whole hour moved "
    "less than it",
    PATTERN_KNOWN: "1 where a release or a quiet hour was seen within the envelope "
    "window: the pattern is known, so a climb can be read against it (a series that "
    "has only climbed since it appeared is not known: a warm-up, a first tooth)",
    RELEASED: "1 where a release was seen within the release window: a climb above the "
    "peaks is the next tooth or swing until it beats the envelope's own recent rise",
    SHARP_RELEASE: "1 where the figure fell by more than the pattern swing within the "
    "sharp-release window (a flush, a batch's end, a restart), else 0: each fall reads "
    "1 at one or two lasting evaluations",
    TEETH_PERIOD: "where the envelope window held at least three sharp releases "
    "(SHARP_RELEASE changed five times or more): the window over the number of them, the "
    "teeth's mean period (their next crest is about that far ahead)",
    TEETH: "1 where the envelope window held at least three sharp releases (SHARP_RELEASE "
    "changed five times or more): a sawtooth's teeth, which a daily swing (it falls over "
    "hours) does not have",
    RELEASE_BASE: "where the sharp-release window holds a sharp release (SHARP_RELEASE "
    "1): its lowest figure, the level the next tooth climbs from",
    RELEASE_FALL: "where the sharp-release window holds a sharp release: its highest "
    "figure less its lowest, the height of the tooth that fell (one or two figures a "
    "release)",
    TOOTH_SPREAD: "where the pattern has teeth (TEETH): the range of the envelope "
    "window's falls (RELEASE_FALL) over their number less one (the window over the "
    "teeth's mean period, less one): for heights spread evenly between two bounds, how "
    "far the tallest seen falls short of the upper one on average",
    TOOTH_CREST: "where the pattern has teeth: how high the tooth now climbing is "
    "expected to go at most. The last release's base (RELEASE_BASE), plus the tallest "
    "fall of the envelope window and TOOTH_SPREAD (the tallest tooth the pattern makes) "
    "on the floor the last release left: the forecasts that read it carry it on by the "
    "lasting trend",
    PATTERN_CEILING: "what a recurring climb stays within: the envelope of the peaks "
    "plus a margin (1 % of the limit; after a release the larger of that and, where the "
    "floor is known not to rise or the pattern has teeth (TEETH), 30 % of the teeth's "
    "height, the envelope over the floor "
    "less a day of the lasting trend, plus "
    "the envelope's rise over the release window, at most a release window of the "
    "lasting trend where one exists; none where the envelope is what the "
    "hour before the last one reached: a steady climb's own), at most last week's "
    "peaks (HIGHEST_ENVELOPE) plus 1 % of the limit where they stood above the day's "
    "envelope a release window ago (after a weekend or a quiet day the peaks that recur "
    "are last week's, and the day's envelope and its margins ride a climb back to "
    "them); where the pattern has teeth and it is higher, the tooth's expected crest "
    "(TOOTH_CREST) plus two TOOTH_SPREADs (a taller tooth is beyond what the teeth make "
    "nine times in ten from five teeth a day; the crest stands on the floor the last "
    "release left, which a young leak's trend under-reads). The figure "
    "CLIMB_BEYOND_PATTERN compares with",
    WORKING_SET_BASELINE: "lowest working set over the envelope window: flat while "
    "unreclaimable memory squeezes page cache out",
    HIDDEN_BASELINE: "lowest hidden memory over the envelope window",
    HIDDEN_BASELINE_RISE: "growth of the hidden memory's floor over one window",
    FALLEN_FLOOR: "the floor (UNRECLAIMABLE_BASELINE) as it stood an hour before the "
    "memory fell below it by the pattern's swing for a whole hour (a leak fixed in "
    "place, a restart without a kill, a weekend's first quiet day), held while the "
    "memory stays below it and the envelope still holds a peak above it (a window at "
    "most), none after an OOM kill: the envelope and the floor read before the fall "
    "are no pattern to come back to, and no lasting growth is read meanwhile",
    PEAK_CARRIED: "where the tallest peak of the envelope window stands now if it recurs: "
    "the envelope plus an hour of the lasting trend (its youngest peak is that old) and, "
    "where the pattern has teeth (TEETH), each older part of the window (a quarter) its "
    "highest hourly maximum plus the trend since the part ended, and the tooth's crest "
    "(TOOTH_CREST: the teeth's spread, on the floor the last release left), the highest "
    "of those; present with lasting growth, or where the pattern has teeth (the crest "
    "alone: its forecast needs the growth). A flush's or a burst's timing is chance: the day's "
    "tallest may recur at any hour, a day of leak higher. A daily crest recurs at its "
    "hour, which the daily pattern forecasts",
    PATTERN_LIFT: "what the daily pattern adds to the hours ahead one period ago: a "
    "period of lasting growth, or the least rise of the last three hours above the same "
    "hours one period ago (PATTERN_RISE) where that is more, up to two periods of lasting "
    "growth: the lasting rate lags a leak younger than two envelope windows, and a step "
    "a period ago is already in the hours ahead; the rise now, uncapped, where it is a "
    "ramp (the recent hours' least rise more than a quarter above the most of the same "
    "hours 20 h ago: a leak younger than about a day and a half; a step's rise stands "
    "still) and the pattern has no teeth (TEETH: drifting teeth are no ramp) (absent "
    "without lasting growth)",
    PATTERN_PEAK: "the peak the daily pattern forecasts within the hours ahead (label "
    "within): the highest figure of those hours one period ago plus PATTERN_LIFT "
    "(absent without lasting growth)",
    PATTERN_HOLDS: "1 where the daily pattern held over the envelope window: no hour "
    "rose above the pattern's hours (PATTERN_RISE) by more than the pattern's lift "
    "(PATTERN_LIFT) plus the peaks' margin and the quiet hours' swing, over a whole window. "
    "There, a pattern peak below the limit means the peaks stay below it for those "
    "hours, and the page does not start on the envelope's straight line (a fast leak "
    "under a daily swing crests near the limit half a day before the climb that kills)",
    ABOVE_PATTERN: "1 where the last hour rose above the daily pattern's hours "
    "(PATTERN_RISE) by more than a period of lasting growth plus the peaks' margin and "
    "the quiet hours' swing: growth faster than the lasting horizon reads (a leak "
    "that speeds up: the lasting rate is a day's average). A climb above the pattern's "
    "ceiling there is beyond the pattern (CLIMB_BEYOND_PATTERN). Never where the "
    "pattern has teeth (TEETH): teeth drift through the day, so an hour rises above the "
    "same hour a period ago by a tooth's height at every other hour",
    GREW: "1 where some horizon's growth estimate was present within the hold window",
    GREW_LATELY: "1 where GREW was seen within the envelope window (a day): NearLimit "
    "reads this once a minute, not a day of GREW (nor of every growth series)",
    KIND_GROWTH: "deriv of each kind over the last hour (bytes/s)",
    PROCESS_GROWTH: "deriv of each process's memory over the last hour (bytes/s)",
    KIND_LASTING_GROWTH: "each kind's day-over-day rise (the last hour's mean minus the "
    "same hour's one period ago, per second): a daily swing, read at the same phase, "
    "does not rise. Where the pod's floor does not rise, its peaks' (KIND_PEAK_GROWTH): "
    "a batch that grows over a flat floor grows in its peaks, not in the hour before "
    "it. Recorded only where the lasting horizon binds the pod: the top grower reads it "
    "nowhere else",
    PROCESS_LASTING_GROWTH: "each process's day-over-day rise, as KIND_LASTING_GROWTH",
    TOP_GROWER: "per binding cgroup: the kind whose growth explains most of its growth "
    "and, when that kind is a process's (anon, shmem), the process that grows most; "
    "value = that process's (or the kind's) growth (bytes/s) at the horizon that binds: "
    "day over day where the lasting horizon binds (a slow leak under a daily swing is "
    "named, not the swing), over the last hour otherwise",
    VLLM_ANSWERED: "1 where the pod's vLLM answered at least once in the last hour: a "
    "vLLM without a listener (vllm run-batch) never does, and gets no meta alert",
    VLLM_ANSWERED_LATELY: "1 where VLLM_ANSWERED was 1 within the envelope window (a "
    "day): the vLLMs whose failing scrape is news (ScrapeFailing reads this, not a day "
    "of VLLM_ANSWERED each minute)",
    TMPFS_PREDICTED: "each memory-backed tmpfs's usage shm_fill_horizon ahead on its "
    "trend over shm_fill_window (predict_linear), where the series spans half that "
    "window: what SharedMemoryFillingUp compares with the mount's size",
}
FLOOR_MEMORY_RECORDING_RULE_HELP: dict[str, str] = {
    HIGHEST_FLOOR: "the highest floor of most of a window (WHOLE_BASELINE) recorded over the floor "
    "memory before the last envelope window: a weekly pattern's weekday floor comes back "
    "to it (no lasting growth), a leak's floor rises above it",
    HIGHEST_FLOOR_SINCE: "when the floor HIGHEST_FLOOR holds was recorded (unix seconds, "
    "to a lasting interval): UNRECLAIMABLE_BASELINE_RISE from it spans that long, not a "
    "window. Where the floor memory holds no such time (its highest floor left it, or "
    "its history broke), its oldest: a floor memory ago",
    FLOOR_RISE_PAST_FALL: "the floor now minus a whole floor 2-6 windows ago that a later "
    "one fell below by the peaks' margin (a quiet day came after it) and the peaks now "
    "reach, over its age, scaled to a window; the least of them, none where the pod was "
    "OOM-killed since: after a weekend, the floor a window ago is the quiet day's, and "
    "the rise is read from the days before it",
    HIGHEST_ENVELOPE: "the highest envelope of the peaks (PEAK_ENVELOPE) recorded over the "
    "floor memory before the last envelope window: peaks that rise two days running "
    "are lasting growth only above it (a weekly pattern's weekday peaks come back to it)",
    HIGHEST_ENVELOPE_SINCE: "when the envelope last held HIGHEST_ENVELOPE (unix seconds, "
    "to a lasting interval): the peaks' rise above it spans that long, not a window "
    "(a leak under a weekly pattern, read on a Tuesday from Friday's peaks). Where the "
    "floor memory holds no such time, its oldest: a floor memory ago",
    KIND_PEAK_GROWTH: "each kind's highest figure over the envelope window minus its "
    "highest over the window before, per second: what grows in the peaks. Recorded "
    "only where the lasting horizon binds the pod and no cgroup of it has a floor that "
    "rises (a batch that grows over a flat floor), for KIND_LASTING_GROWTH",
    PROCESS_PEAK_GROWTH: "each process's rise of its peaks, as KIND_PEAK_GROWTH",
}
RECORDING_RULE_HELP: dict[str, str] = {**FAST_RECORDING_RULE_HELP,
                                       **LASTING_RECORDING_RULE_HELP,
                                       **FLOOR_MEMORY_RECORDING_RULE_HELP}
RECORDING_RULES: tuple[str, ...] = tuple(RECORDING_RULE_HELP)
FORECAST_SERIES: tuple[str, ...] = (LIMIT, UNRECLAIMABLE, HEADROOM, BINDING, GROWTH,
                                    PEAK_ENVELOPE, TIME_TO_LIMIT, TOP_GROWER)

ALERT_NAMES: tuple[str, ...] = (
    "HeadroomMemoryFillingUp",
    "HeadroomMemoryNearLimit",
    "HeadroomMemoryReclaimAtLimit",
    "HeadroomHiddenMemoryGrowth",
    "HeadroomSharedMemoryFillingUp",
    "HeadroomStaleSharedMemory",
    "HeadroomKVOffloadWillNotFit",
    "HeadroomNodeMemoryPressure",
    "HeadroomPodOOMKilled",
    "HeadroomExporterDown",
    "HeadroomCollectorFailing",
    "HeadroomVLLMScrapeFailing",
)
