"""The rules' config: every threshold, window and name the rules take (kubernetes-mixin's
``_config``). ``CONFIG`` is what ships; dashboards draw their thresholds from it, so a
panel's red line and the alert that pages on it cannot differ.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from exporter.catalog import WORKLOAD_LABELS

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR
MiB = 1024 * 1024


# An hour's range of sample-to-sample noise is about four deviations: HOURLY_NOISE reads
# the noise in those units (the rules and their mirror).
HOUR_SWING_DEVIATIONS = 4
# The quiet swing is this quantile of a day's hourly noise: the least of 288 overlapping
# estimates reads the noise about a fifth low (a band that narrow pages after the kill),
# and a quarter of the hours may hold a release or a step and still not widen it.
QUIET_QUANTILE = 0.25

@dataclass(frozen=True)
class Config:
    """Every knob of the rules. Durations are whole seconds (``duration`` renders them);
    ``DURATION_FIELDS`` lists them for ``scaled``."""

    # --- selection and identity ---------------------------------------------------------
    # Label matchers (without braces) that select headroom's series.
    selector: str = 'job="headroom"'
    # Labels every recording rule keeps: one series per workload, whatever exporter
    # instance scraped it (a DaemonSet rollout changes `instance`). Add "cluster" here
    # when one Prometheus sees several clusters.
    group_labels: tuple[str, ...] = WORKLOAD_LABELS
    # Labels that identify a node's series (headroom_node_memory_*): the exporter's
    # target. Use ("node",) where the scrape config adds a node label.
    node_labels: tuple[str, ...] = ("instance",)
    runbook_url_base: str = (
        "https://github.com/vllm-headroom/headroom/blob/main/alerts/runbooks"
    )
    rule_group_prefix: str = "headroom"

    # --- gaps and restarts of the exporter ------------------------------------------------
    # Recorded figures hold their last sample this long, so a scrape gap or an exporter
    # pod being replaced does not empty them (and resolve every alert).
    hold_s: int = 10 * MINUTE
    # Alerts keep firing this long after their condition last held: a gap or a noisy
    # sample does not resolve a page and re-fire it.
    keep_firing_s: int = 15 * MINUTE
    # Forecasts compare growth with the highest unreclaimable figure over this window
    # (the recent peak): a kill comes with a peak, and a noisy sample must not hold back
    # a `for:`.
    peak_window_s: int = 10 * MINUTE

    # --- the forecast (recorded series; README "The forecast (recorded series)") --------
    # Every window is taken over bytes (unreclaimable memory, its hourly minima and
    # maxima), never over a ratio or a headroom: the limit enters only at the instant, so
    # a resized limit (VPA in place) changes every forecast at the next evaluation and no
    # window mixes two limits.
    # Short horizon: the slowest deriv over short_window_s seen over short_sustain_s
    # (a fast ramp that lasted; a burst that stopped drops out within minutes).
    short_window_s: int = 5 * MINUTE
    short_sustain_s: int = 6 * MINUTE
    # ...and only while the climb goes on: the figure now above every one from
    # climbing_lag_s to climbing_lag_s + short_window_s ago. A batch that stopped drops
    # out within this lag, not a whole slope window (a nightly batch that adds a third
    # of the limit in minutes and holds it must not page; a 15-minute ramp must).
    climbing_lag_s: int = 2 * MINUTE
    # ...by more than this share of the quiet hours' swing (QUIET_SWING, four deviations
    # of the noise): on a plateau the noise makes a new high every few minutes, and each
    # one kept a stopped batch's short forecast alive for another minute (a first
    # night's 8-minute batch to 91 % of the limit paged on one). None before an hour's
    # noise is known.
    climbing_noise_share: float = 0.5
    # Medium horizon: the same over hours.
    medium_window_s: int = 30 * MINUTE
    medium_sustain_s: int = 30 * MINUTE
    # ...and only while the climb goes on: the highest figure of the last
    # medium_climbing_window_s above the highest of the window before by this share of
    # the quiet hours' swing. The slowest 30-minute slope still reads a finished ramp for
    # half an hour after it stops (a nightly batch that climbed to 98 % of the limit and
    # held paged a day early); highest against highest, so a plateau's noise cancels and
    # a noisy climb still counts.
    medium_climbing_window_s: int = 15 * MINUTE
    medium_climbing_noise_share: float = 0.125
    # Lasting horizon: from hourly minima and maxima (recorded by a group evaluated every
    # lasting_interval_s), the rise per envelope window of the floor and of the envelope
    # of the peaks. Never a day of raw samples per evaluation.
    hourly_window_s: int = HOUR
    lasting_interval_s: int = 5 * MINUTE
    baseline_window_s: int = DAY  # the envelope window: peaks and floor over a day
    # A workload younger than two envelope windows has a lasting horizon once it has
    # lived this much of the earlier window past its first 45 minutes: the floor's rise
    # over that part, scaled to a window (a pod rolled out yesterday that steps up every
    # few hours dies before a two-day history exists). A recurring pattern cannot lift
    # the floor of a whole window above the lowest figure of any part of the one before.
    lasting_min_cover_s: int = 6 * HOUR
    # A workload's first minutes are its warm-up (a model loading): no hourly minimum
    # reads them.
    warm_up_s: int = 45 * MINUTE
    # The lasting growth counts only above both (per envelope window).
    min_baseline_rise_bytes: int = 64 * MiB
    min_baseline_rise_ratio: float = 0.002  # of the limit
    # The daily pattern: the same hours one period ago, lifted by a period of lasting
    # growth, forecast the peaks of the hours ahead (a daily swing's crest, a nightly
    # batch). Looked ahead 1, 2, 3 and 6 hourly windows.
    pattern_period_s: int = DAY
    # ...or by the least rise of the hours within this long above the same hours one
    # period ago, where that is more (a leak younger than two envelope windows).
    pattern_recent_s: int = 3 * HOUR
    # ...at most this many periods of the lasting trend (a step a period ago lifts the
    # recent hours as much; a leak 1.5 envelope windows old reads half its rate).
    pattern_recent_max_trends: float = 2.0
    # ...unless that rise is a ramp: it grew by more than this share of itself over
    # pattern_ramp_s. A leak younger than about a day and a half rises above the same
    # hours a day ago more with every hour (its lasting rate lags it most: the cap paged
    # one 10 h early and another at its kill); a step 20 h ago or more lifted those hours
    # at once and its rise has stood still since (its anniversary, which the hours ahead
    # a day ago already hold, is then within the pattern's 1-3 h windows at most).
    pattern_ramp_s: int = 20 * HOUR
    pattern_ramp_share: float = 0.25
    # How long a figure recorded every lasting_interval_s is held by its readers.
    lasting_hold_s: int = 15 * MINUTE
    # The peaks' own forecast carries each part of the envelope window on by the lasting
    # trend since that part ended (the highest of the parts): the tallest tooth or burst
    # of the day, recurring now, stands higher by the leak since it came. This many
    # parts; a peak's age is read to within a part (the envelope window over this).
    envelope_parts: int = 4
    # The floor's rise is measured from the highest floor of this long before the last
    # envelope window (recorded every floor_memory_interval_s), not only the floor one
    # window ago: a weekly pattern's weekday floor comes back to last week's and is no
    # growth; a leak's floor rises above every floor before it.
    floor_memory_s: int = 7 * DAY
    floor_memory_interval_s: int = HOUR
    # ...of floors read over at least this much of a window past the warm-up: a young
    # pod's first hours may hold no trough yet (a floor read over them is the highest
    # of all, and a leak's floor never rises above it), while its first whole day may
    # be its only weekday before a weekend. A trough missed by a window this long is at
    # most the warm-up's hours from it.
    floor_memory_min_cover_s: int = 22 * HOUR
    # Trend slope for panels and HeadroomNodeMemoryPressure.
    slope_window_s: int = HOUR

    # --- which cgroup binds ------------------------------------------------------------
    # A container binds (its own limit comes first) when its headroom is no more than the
    # pod cgroup's plus this tolerance; otherwise the pod-level cgroup binds.
    owner_tolerance_bytes: int = 256 * MiB
    owner_tolerance_ratio: float = 0.02  # of the limit

    # --- HeadroomMemoryFillingUp ------------------------------------------------------
    # Ticket (warning): the lasting horizon forecasts the limit within the horizon; it
    # clears only beyond the clear horizon (hysteresis), and only once the lasting
    # forecast has read beyond it (or nothing) for the clear hold, unless the limit
    # changed: the lasting rate passes through low readings for an hour or so while the
    # floor's rise hands over to the peaks' (a weekend's fall), and a ticket days ahead
    # loses nothing by clearing two hours late.
    fill_warning_horizon_s: int = 3 * DAY
    fill_warning_clear_horizon_s: int = 4 * DAY
    fill_warning_clear_hold_s: int = 2 * HOUR
    fill_warning_for_s: int = 30 * MINUTE
    # Page (critical): the short or medium horizon forecasts the limit within the
    # critical horizon, confirmed by the envelope of the peaks (the climb goes beyond what
    # the recurring peaks and their lasting trend explain, or the lasting trend says the
    # peaks reach the limit within the envelope window); or the peaks' envelope reaches
    # the limit within the lasting page horizon at the lasting rate (a slow leak, a
    # sawtooth whose teeth climb), or within the confirm horizon while a climb that
    # reaches it within the fast confirm horizon goes on.
    # 75 minutes, not 60: the sustained slope reads 10-20 % below the true rate of a
    # noisy ramp (it is the slowest slope over the sustain window), and the page must
    # still be out 45 minutes before the kill.
    fill_critical_horizon_s: int = 75 * MINUTE
    fill_critical_clear_horizon_s: int = 3 * HOUR
    fill_lasting_page_horizon_s: int = 3 * HOUR
    # The lasting horizon itself (the daily pattern's windows ahead are whole hours and
    # a day old: a crossing it puts within 2 h may come within the hour).
    fill_pattern_page_horizon_s: int = 2 * HOUR
    fill_lasting_confirm_horizon_s: int = 6 * HOUR
    fill_fast_confirm_horizon_s: int = 2 * HOUR
    # ...or the peaks (the envelope, or the last hour's) come within this much of the
    # quiet hours' swing of the limit, growing or not: about two noise deviations (an
    # hour's range is about four), so one excursion of that size is the kill. A slow
    # leak in a big limit spends a day in that band, and its kill is the noise's choice:
    # no time to limit can place it. The page forecasts the band too: the critical
    # horizon counts to the band, not to the limit (alerts/memory.py
    # _time_to_noise_band). The swing is the quiet hours' noise (QUIET_SWING: four
    # deviations from each hour's trend line, so a sawtooth's tooth or a leak's climb is
    # no noise).
    fill_noise_band_swings: float = 0.5
    # A climb counts as beyond the recurring peaks once it is above their envelope by
    # more than this much of the lasting trend (a tooth of a sawtooth with a period up
    # to this long climbs less, and is released).
    fill_beyond_trend_s: int = 6 * HOUR
    # ...and by more than this much of the limit (the peaks' own noise: a plateau that
    # comes back to yesterday's level is not beyond it).
    fill_beyond_peaks_ratio: float = 0.01
    # The pattern is known once the figure fell below its peaks by more than this much
    # of the limit, or moved less than it for a whole hour; a figure that has only
    # climbed since it appeared (a warm-up, a first tooth, a young leak) is read against
    # no pattern: its short and medium climbs count only above the unknown-pattern
    # ratio of the limit.
    pattern_swing_ratio: float = 0.05
    fill_unknown_pattern_ratio: float = 0.92
    # A release within this window makes a climb above the peaks the next tooth until
    # it goes beyond the envelope's own rise over the window.
    release_window_s: int = 6 * HOUR
    # A fall below the floor: the memory of this window, all of it below the floor as
    # it stood before by pattern_swing_ratio of the limit (a leak fixed in place, a
    # restart without a kill). What the floor and the envelope read before it is no
    # pattern to come back to: no lasting growth is read until the memory climbs back
    # to that floor or the envelope has left it (FALLEN_FLOOR).
    fallen_floor_window_s: int = 30 * MINUTE
    # ...and, after a release over a floor known not to rise, beyond this share of the
    # teeth's height (the envelope less the floor and the window's lasting trend) where
    # that is more than the peaks' margin: teeth of irregular height (a cache flushed on
    # load, not on a clock) top the day's tallest by a part of their own height, and that
    # is the pattern, not a climb beyond it.
    fill_beyond_teeth_share: float = 0.3
    # ...and over a rising floor too where the pattern has teeth: at least this many
    # sharp releases (a fall of pattern_swing_ratio of the limit within
    # sharp_release_window_s: a flush) over the envelope window. A daily swing falls
    # over hours and has none, so a leak out of it still counts beyond the margin; a
    # cache flushed at irregular times over a leak tops the day's tallest tooth by a
    # part of a tooth's height, and that is its pattern, not the kill.
    teeth_min_releases: int = 3
    # Longer than the lasting interval plus the evaluation interval: each fall is seen
    # at one or two lasting evaluations, whatever the phase.
    sharp_release_window_s: int = 10 * MINUTE
    # Where the pattern has teeth, a climb is the tooth's until it passes the tooth's
    # expected crest (TOOTH_CREST) by this many TOOTH_SPREADs: for n heights spread
    # evenly between two bounds, the upper bound lies above the tallest seen by less
    # than three times the range over n - 1 nine times in ten from five teeth a day (the
    # 90th percentile of that gap is 2.5-3.1 ranges over n - 1 for n = 5-16), about four
    # times in five with three or four (3.5-4.3).
    teeth_beyond_spreads: float = 2.0
    fill_critical_for_s: int = 5 * MINUTE
    # A page stays on while the pod keeps being OOM-killed and grows again within this
    # window of a kill (a crash loop under the same pod name: one stream of pages).
    crash_loop_window_s: int = 6 * HOUR

    # --- HeadroomMemoryNearLimit and panel thresholds -----------------------------------
    near_limit_ratio: float = 0.95  # red on panels
    near_limit_clear_ratio: float = 0.92  # a firing page clears only below this
    near_limit_for_s: int = 10 * MINUTE
    # ...and only when what is left is within the memory's own recent swing (the
    # highest minus the lowest figure of the last hour) or under this much of the limit:
    # a pod that sits flat at 96 % of a big limit is not an OOM kill in the making.
    near_limit_min_headroom_ratio: float = 0.01
    # Orange on panels; HeadroomMemoryReclaimAtLimit needs this much unreclaimable.
    high_ratio: float = 0.85
    high_clear_ratio: float = 0.80

    # --- HeadroomMemoryReclaimAtLimit -------------------------------------------------
    reclaim_window_s: int = 15 * MINUTE
    reclaim_for_s: int = 15 * MINUTE

    # --- HeadroomHiddenMemoryGrowth ----------------------------------------------------
    hidden_min_rise_bytes: int = 64 * MiB
    hidden_min_rise_ratio: float = 0.01  # of the limit
    hidden_for_s: int = HOUR

    # --- HeadroomSharedMemoryFillingUp (node-mixin's NodeFilesystemSpaceFillingUp) ------
    shm_fill_window_s: int = 6 * HOUR
    shm_fill_horizon_s: int = DAY
    shm_fill_max_free_ratio: float = 0.40
    shm_fill_for_s: int = HOUR

    # --- HeadroomStaleSharedMemory ----------------------------------------------------
    stale_shm_min_bytes: int = 64 * MiB
    stale_shm_for_s: int = 30 * MINUTE

    # --- HeadroomKVOffloadWillNotFit --------------------------------------------------
    kv_offload_for_s: int = 15 * MINUTE

    # --- HeadroomNodeMemoryPressure ---------------------------------------------------
    # MemAvailable below this fraction of MemTotal and falling toward the kubelet's
    # eviction threshold (default hard threshold memory.available<100Mi) within the
    # horizon, by its trend.
    node_pressure_ratio: float = 0.10
    node_eviction_bytes: int = 100 * MiB
    node_pressure_horizon_s: int = HOUR
    node_pressure_for_s: int = 10 * MINUTE
    # A pod whose limit is at least this fraction of the node's memory has no limit of
    # its own (the exporter reports the node's memory as its effective limit).
    no_limit_ratio: float = 0.90

    # --- HeadroomPodOOMKilled ---------------------------------------------------------
    # A kill: a counter above the highest value it had over the lookback, one window ago.
    oom_window_s: int = 10 * MINUTE
    oom_lookback_s: int = HOUR

    # --- meta-monitoring --------------------------------------------------------------
    exporter_down_for_s: int = 15 * MINUTE
    collector_window_s: int = 15 * MINUTE
    collector_for_s: int = 15 * MINUTE
    vllm_scrape_window_s: int = 15 * MINUTE
    vllm_scrape_for_s: int = 15 * MINUTE

    def replace(self, **changes: Any) -> Config:
        """A copy with some fields changed (dataclasses.replace, validated)."""
        return dataclasses.replace(self, **changes).validated()

    def scaled(self, factor: float, minimum_s: int = 1) -> Config:
        """Every duration divided by ``factor`` (at least ``minimum_s``): for a live test
        with a fast scrape, e.g. ``CONFIG.scaled(720)`` turns a day into 2 minutes."""
        if factor <= 0:
            raise ValueError("factor must be positive")
        changes = {
            f: max(minimum_s, round(getattr(self, f) / factor)) for f in DURATION_FIELDS
        }
        return self.replace(**changes)

    def validated(self) -> Config:
        for f in DURATION_FIELDS:
            if getattr(self, f) <= 0:
                raise ValueError(f"{f} must be positive")
        if self.fill_critical_horizon_s > self.fill_warning_horizon_s:
            raise ValueError("the critical horizon must not exceed the warning horizon")
        for fire, clear in _HYSTERESIS:
            if getattr(self, clear) < getattr(self, fire):
                raise ValueError(f"{clear} must not be below {fire} (hysteresis)")
        if self.near_limit_clear_ratio > self.near_limit_ratio or \
                self.high_clear_ratio > self.high_ratio:
            raise ValueError("a clear ratio must not exceed its fire ratio")
        for f in _RATIO_FIELDS:
            if not 0 <= getattr(self, f) <= 1:
                raise ValueError(f"{f} must be within 0..1")
        if not {"namespace", "pod", "container"} <= set(self.group_labels):
            raise ValueError("group_labels must keep namespace, pod and container")
        if self.envelope_parts < 1 or self.teeth_min_releases < 1:
            raise ValueError("envelope_parts and teeth_min_releases must be at least 1")
        if not self.node_labels:
            raise ValueError("node_labels must name at least one label")
        return self

    @property
    def pod_labels(self) -> tuple[str, ...]:
        """The group labels without container: what identifies a pod."""
        return tuple(x for x in self.group_labels if x != "container")

    def runbook_url(self, alertname: str) -> str:
        return f"{self.runbook_url_base.rstrip('/')}/{alertname}.md"


DURATION_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Config) if f.name.endswith("_s")
)
_HYSTERESIS: tuple[tuple[str, str], ...] = (
    ("fill_warning_horizon_s", "fill_warning_clear_horizon_s"),
    ("fill_critical_horizon_s", "fill_critical_clear_horizon_s"),
)
_RATIO_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Config) if f.name.endswith("_ratio")
)

CONFIG = Config().validated()
"""What ships."""
