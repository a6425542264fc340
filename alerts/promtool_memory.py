"""promtool cases of the memory alerts (``alerts/memory.py``): near the limit, filling up
(the short horizon pages, the lasting one tickets), reclaim at the limit, hidden growth."""

from __future__ import annotations

from collections.abc import Callable

from exporter import catalog as c
from exporter import promql as q
from exporter.promql import DAY, HOUR, MINUTE, Config, MiB

from .promtool_series import (
    LONG_STEP,
    GiB,
    Test,
    alert_labels,
    boundary,
    dur,
    firing_expr,
    linear,
    per_second,
    series,
    steps,
    whole,
    workload,
)

# The page firing for one pod (``% pod``), per container.
PAGE_FIRING = ('count by (alertname, severity, container) (ALERTS{alertstate="firing", '
               'alertname="HeadroomMemoryFillingUp", severity="critical", pod="%s"})')


def near_limit(cfg: Config) -> Test:
    limit = 32 * GiB
    on = 30  # minute the unreclaimable figure jumps to 96%
    fires = on * MINUTE + cfg.near_limit_for_s
    return {
        "name": "HeadroomMemoryNearLimit: for elapses",
        "interval": "1m",
        "input_series": [
            series(c.MEMORY_LIMIT_BYTES.name, f"{limit}x120", **workload()),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name,
                   steps((limit / 2, on), (0.96 * limit, 121 - on)), **workload()),
            series("up", "1x120"),
        ],
        "promql_expr_test": boundary("HeadroomMemoryNearLimit", "critical", "vllm", fires),
        "alert_rule_test": [{
            "eval_time": dur(fires),
            "alertname": "HeadroomMemoryNearLimit",
            "exp_alerts": [{
                "exp_labels": {"severity": "critical", **workload()},
                "exp_annotations": {
                    "summary": "ns/p has almost no reclaimable memory left.",
                    "description": (
                        "Memory the kernel cannot reclaim is at 96% of the 32Gi"
                        "B limit of container vllm of pod ns/p; the next allocation that "
                        "does not fit triggers the OOM killer."
                    ),
                    "runbook_url": cfg.runbook_url("HeadroomMemoryNearLimit"),
                },
            }],
        }],
    }


def near_limit_flat(cfg: Config) -> Test:
    """A pod that sits flat at 96 % of a big limit (its memory moves by 16 MiB, the 3.2
    GiB left is far beyond its swing) is not an OOM kill in the making: no page."""
    limit = 80 * GiB
    level = 0.96 * limit
    wobble = " ".join(str(whole(level + (16 * MiB if i % 2 else 0))) for i in range(121))
    expr = 'ALERTS{alertname="HeadroomMemoryNearLimit", alertstate="firing"}'
    return {
        "name": "HeadroomMemoryNearLimit: flat at 96 % of a big limit, no page",
        "interval": "1m",
        "input_series": [
            series(c.MEMORY_LIMIT_BYTES.name, f"{whole(limit)}x120", **workload()),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, wobble, **workload()),
            series("up", "1x120"),
        ],
        "promql_expr_test": [{"expr": expr, "eval_time": dur(m * MINUTE),
                              "exp_samples": []} for m in (30, 60, 120)],
    }


def near_limit_after_growth(cfg: Config) -> Test:
    """A pod that climbed from half its limit to 99.5 % and then sits there is
    FillingUp's for a day after it last grew (the lasting group records what grew every
    5 minutes: ``GREW``): NearLimit stays silent hours after the growth estimates are
    gone. Its twin, flat at 99.5 % from the start, pages."""
    limit = 32 * GiB
    flat, climb, after = 120, 60, 240  # minutes
    n = flat + climb + after
    top = 0.995
    rise = int((top - 0.5) * limit / climb)
    climbed = f"{steps((limit / 2, flat))} {linear(limit / 2 + rise, rise, climb)} " \
              f"{steps((limit / 2 + rise * climb, after))}"
    inputs = [series("up", f"1x{n}")]
    for pod, figure in (("p", climbed), ("q", steps((top * limit, n)))):
        inputs += [series(c.MEMORY_LIMIT_BYTES.name, f"{limit}x{n - 1}", **workload(pod)),
                   series(c.MEMORY_UNRECLAIMABLE_BYTES.name, figure, **workload(pod))]
    firing = 'ALERTS{alertname="HeadroomMemoryNearLimit", alertstate="firing", pod="%s"}'
    grew = f'{q.GROWTH}{{pod="p"}}'
    end = (n - 1) * MINUTE
    return {
        "name": "HeadroomMemoryNearLimit: silent for a day after the pod last grew",
        "interval": "1m",
        "input_series": inputs,
        "promql_expr_test": [
            # Hours after the climb: no growth estimate left, and still no page...
            {"expr": grew, "eval_time": dur(end), "exp_samples": []},
            *({"expr": firing % "p", "eval_time": dur((flat + climb + m) * MINUTE),
               "exp_samples": []} for m in (60, 120, after - 1)),
            # ...while the twin that never grew pages.
            {"expr": f"count({firing % 'q'})", "eval_time": dur(end),
             "exp_samples": [{"labels": "{}", "value": 1}]},
        ],
    }


def filling_up_critical(cfg: Config) -> Test:
    # Grows 1 MiB/s from 20 GiB; the limit drops at minute 60 so that 30 minutes of
    # growth are left: the 1 h prediction crosses the limit, 93% is used.
    rate = MiB
    start = 20 * GiB
    on = 60
    limit_after = start + rate * 90 * MINUTE
    fires = on * MINUTE + cfg.fill_critical_for_s
    return {
        "name": "HeadroomMemoryFillingUp critical: for elapses",
        "interval": "1m",
        "input_series": [
            series(c.MEMORY_LIMIT_BYTES.name, steps((64 * GiB, on), (limit_after, 30)),
                   **workload()),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, linear(start, rate * 60, 90), **workload()),
            # EngineCore's anon memory is what grows; /dev/shm stays flat.
            series(c.PROCESS_MEMORY_BYTES.name, linear(start - 4 * GiB, rate * 60, 90),
                   **workload(), process="EngineCore", kind=c.RSS_ANON),
            series(c.PROCESS_MEMORY_BYTES.name, f"{GiB}x90", **workload(), process="EngineCore",
                   kind=c.RSS_SHMEM),
            series(c.MEMORY_BYTES.name, linear(start - 4 * GiB, rate * 60, 90), **workload(),
                   kind=c.KIND_ANON),
            series(c.TMPFS_USED_BYTES.name, f"{GiB}x90", **workload(container=""),
                   mount="/dev/shm"),
            series("up", "1x90"),
        ],
        "alert_rule_test": [{
            "eval_time": dur(fires),
            "alertname": "HeadroomMemoryFillingUp",
            "exp_alerts": [{
                "exp_labels": {"severity": "critical", **workload()},
                "exp_annotations": {
                    "summary": "ns/p will be OOM-killed in about 25m 0s.",
                    "description": (
                        "Unreclaimable memory of container vllm of pod ns/p reaches the "
                        "25.27GiB limit in 25m 0s (the short horizon binds); 1.465GiB are "
                        "left (94.2% used). What grows: EngineCore anon +84.38GiB/day; "
                        "/dev/shm flat. Act now: the kernel OOM-kills the pod when it gets "
                        "there."
                    ),
                    "runbook_url": cfg.runbook_url("HeadroomMemoryFillingUp"),
                },
            }],
        }],
        "promql_expr_test": [
            *boundary("HeadroomMemoryFillingUp", "critical", "vllm", fires),
            # The binding cgroup is the container (its own limit), the top grower its
            # EngineCore's anon memory, the time to limit from the short horizon.
            {"expr": f'{q.BINDING}{{container="vllm"}}', "eval_time": dur(fires),
             "exp_samples": [{"labels": f'{q.BINDING}{{container="vllm", namespace="ns", '
                                        f'pod="p"}}', "value": 1}]},
            {"expr": f"count by (kind, process) ({q.TOP_GROWER})",
             "eval_time": dur(fires),
             "exp_samples": [{"labels": f'{{kind="{c.KIND_ANON}", process="EngineCore"}}',
                              "value": 1}]},
            # No history of a rising baseline: no ticket.
            {"expr": firing_expr("HeadroomMemoryFillingUp"), "eval_time": "85m",
             "exp_samples": [{"labels": alert_labels("HeadroomMemoryFillingUp", "critical",
                                                     "vllm"), "value": 1}]},
        ],
    }


def filling_up_warning(cfg: Config) -> Test:
    # A steady leak of ~2 GiB/day for two days under a 100 GiB limit (baseline rise above
    # both minimums, plenty of headroom); at 2d2h the limit drops in place to leave 8 h
    # of growth: the lasting horizon tickets within its `for:`, and does not page yet.
    # (The lasting horizon reads two whole days past the first hour's warm-up.)
    rate = per_second(2 * GiB)
    start = 10 * GiB
    on = 2 * DAY + 2 * HOUR
    total = on + 2 * HOUR
    limit_after = start + rate * (on + 8 * HOUR)
    fires = on + cfg.fill_warning_for_s
    n_on = on // LONG_STEP
    n = total // LONG_STEP + 1
    return {
        "name": "HeadroomMemoryFillingUp warning: for elapses",
        "interval": dur(LONG_STEP),
        "input_series": [
            series(c.MEMORY_LIMIT_BYTES.name, steps((100 * GiB, n_on), (limit_after, n - n_on)),
                   **workload()),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, linear(start, rate * LONG_STEP, n),
                   **workload()),
            series("up", f"1x{n}"),
        ],
        "promql_expr_test": [
            *boundary("HeadroomMemoryFillingUp", "warning", "vllm", fires, LONG_STEP),
            # A steady leak's tallest peak is its last: carried on by the trend since
            # each part of the day ended, it is the figure now.
            {"expr": f"abs({q.PEAK_CARRIED} - {q.UNRECLAIMABLE}) < bool {MiB}",
             "eval_time": dur(on),
             "exp_samples": [{"labels": f"{{{_labels(workload())}}}", "value": 1}]},
            # Eight hours of headroom at the drop, seven an hour later: no page yet.
            {"expr": (
                'count(ALERTS{alertname="HeadroomMemoryFillingUp", severity="critical"})'),
             "eval_time": dur(on + HOUR), "exp_samples": []},
        ],
    }


def filling_up_warning_clears(cfg: Config) -> Test:
    # The leak of filling_up_warning, ticketed; an hour later one pod's leak is fixed in
    # place (5 GiB freed, flat after: below the day's floor by far more than the
    # pattern's swing) and the other's limit is raised to 1 TiB. The fixed pod's floor
    # has fallen (FALLEN_FLOOR): no lasting growth is read from the envelope that still
    # holds its last peaks (the rules before read the peaks' rise, 1.7 GiB a day, from
    # five hours after the fix and ticketed again), and its ticket clears without the
    # clear hold, as the raised pod's does (its keep_firing_for): a fallen floor or a new
    # limit is a new forecast, not a wobble. (The hold itself: replay draw weekly-leak 6.)
    rate = per_second(2 * GiB)
    start = 10 * GiB
    on = 2 * DAY + 2 * HOUR
    released = on + HOUR
    total = released + 6 * HOUR
    limit_after = start + rate * (on + 8 * HOUR)
    n_on, n_rel = on // LONG_STEP, released // LONG_STEP
    n = total // LONG_STEP + 1
    kept = start + rate * LONG_STEP * (n_rel - 1) - 5 * GiB
    ticket = ('count by (pod) (ALERTS{alertstate="firing", '
              'alertname="HeadroomMemoryFillingUp", severity="warning"})')

    def firing(at: int, *pods: str) -> Test:
        return {"expr": ticket, "eval_time": dur(at),
                "exp_samples": [{"labels": f'{{pod="{p}"}}', "value": 1} for p in pods]}

    def released_has(name: str, at: int, present: bool, matchers: str = "") -> Test:
        return {"expr": f'count({name}{{{matchers}pod="released"}})', "eval_time": dur(at),
                "exp_samples": [{"labels": "{}", "value": 1}] if present else []}

    return {
        "name": "HeadroomMemoryFillingUp warning: clears at once, without its clear hold, on "
                "a limit raise or a fall below the floor; a leak fixed in place reads no "
                "lasting growth",
        "interval": dur(LONG_STEP),
        "input_series": [
            series(c.MEMORY_LIMIT_BYTES.name, steps((100 * GiB, n_on), (limit_after, n - n_on)),
                   **workload("released")),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name,
                   f"{linear(start, rate * LONG_STEP, n_rel)} {steps((kept, n - n_rel))}",
                   **workload("released")),
            series(c.MEMORY_LIMIT_BYTES.name,
                   steps((100 * GiB, n_on), (limit_after, n_rel - n_on), (1024 * GiB, n - n_rel)),
                   **workload("raised")),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, linear(start, rate * LONG_STEP, n),
                   **workload("raised")),
            series("up", f"1x{n}"),
        ],
        "promql_expr_test": [
            firing(released - LONG_STEP, "raised", "released"),
            # The raise: a new forecast at once (keep_firing_for, then one evaluation).
            firing(released + 25 * MINUTE, "released"),
            # The fall is no wobble: no clear hold (within the hour, as the raise).
            firing(released + 90 * MINUTE),
            released_has(q.FALLEN_FLOOR, released + HOUR, True),
            released_has(q.FALLEN_FLOOR, released - LONG_STEP, False),
            released_has(q.GROWTH, total, False, 'horizon="lasting", '),
            firing(total),
        ],
    }


def teeth(cfg: Config) -> Test:
    # Under a 32 GiB limit, 8 GiB every 4 h: pod t fills for 3 h 55 min and is flushed at
    # once (six sharp releases a day: teeth); pod s climbs for 2 h and falls for 2 h (a
    # swing: 2 % of the limit per 10 min, no sharp release). Only t has teeth.
    period, n = 4 * HOUR // LONG_STEP, (DAY + HOUR) // LONG_STEP + 1
    half = period // 2

    def values(shape: Callable[[int], float]) -> str:
        return " ".join(str(whole(8 * GiB + 8 * GiB * shape(i % period))) for i in range(n))

    inputs = [
        series(c.MEMORY_UNRECLAIMABLE_BYTES.name,
               values(lambda i: i / (period - 1)), **workload("t")),
        series(c.MEMORY_UNRECLAIMABLE_BYTES.name,
               values(lambda i: i / half if i < half else 2 - i / half), **workload("s")),
        *(series(c.MEMORY_LIMIT_BYTES.name, f"{32 * GiB}x{n}", **workload(p)) for p in "ts"),
        series("up", f"1x{n}"),
    ]
    return {
        "name": "TEETH: sharp releases, not a swing's falls",
        "interval": dur(LONG_STEP),
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": q.TEETH, "eval_time": dur(DAY),
             "exp_samples": [{"labels": f"{q.TEETH}{{{_labels(workload('t'))}}}",
                              "value": 1}]},
            # The first flush, 4 h in: one release is no teeth yet.
            {"expr": q.TEETH, "eval_time": dur(5 * HOUR), "exp_samples": []},
        ],
    }


def _labels(labels: dict[str, str]) -> str:
    return ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


def filling_up_noise_band(cfg: Config) -> Test:
    """A slow leak (1 GiB/day) whose memory swings 512 MiB from sample to sample (its
    quiet hours' noise; the leak is their trend, not noise): at 2d2h the limit drops in
    place to 150 MiB above its peaks. The lasting horizon still says hours (3.5 h), but half
    the quiet hours' swing is more than what is left: the next excursion is the
    kill, so it pages within its `for:`. The same leak and gap on a quiet pod (a 16 MiB
    swing) pages nothing. The same swing and gap on a pod that does not grow (no
    horizon gives a time to limit) pages the same: its next excursion is the kill."""
    rate = per_second(GiB)
    start = 40 * GiB
    on = 2 * DAY + 2 * HOUR
    total = on + 2 * HOUR
    n_on, n = on // LONG_STEP, total // LONG_STEP + 1

    def wobbling(swing: float, rate: float) -> str:
        return " ".join(str(whole(start + rate * i * LONG_STEP + (swing / 2 if i % 2 else
                                                                   -swing / 2)))
                        for i in range(n))

    pods = {"p": (512 * MiB, rate), "q": (16 * MiB, rate), "r": (512 * MiB, 0.0)}
    inputs = [series("up", f"1x{n}")]
    for pod, (swing, pod_rate) in pods.items():
        limit_after = start + pod_rate * on + swing / 2 + 150 * MiB
        inputs += [
            series(c.MEMORY_LIMIT_BYTES.name, steps((100 * GiB, n_on),
                                                   (limit_after, n - n_on)),
                   **workload(pod)),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, wobbling(swing, pod_rate),
                   **workload(pod)),
        ]
    page = PAGE_FIRING
    fires = on + cfg.fill_critical_for_s
    return {
        "name": "HeadroomMemoryFillingUp critical: the peaks within the noise of the limit",
        "interval": dur(LONG_STEP),
        "input_series": inputs,
        # The page says why it pages (the noise, not the trend's hours).
        "alert_rule_test": [{
            "eval_time": dur(fires),
            "alertname": "HeadroomMemoryFillingUp",
            "exp_alerts": [{
                "exp_labels": {"severity": "critical", **workload("p")},
                "exp_annotations": {
                    "summary": "ns/p is within the noise of its memory limit: one more "
                               "swing like its quiet hours' OOM-kills it.",
                    "description": (
                        "Unreclaimable memory of container vllm of pod ns/p reaches the "
                        "42.48GiB limit in 3h 25m 55s (the lasting horizon binds); "
                        "146.4MiB are left (99.66% used). Its peaks are 0.15 of its "
                        "quiet hours' swings below the limit (it pages below 0.5). "
                        "What grows: no process or kind recorded. Act now: the kernel "
                        "OOM-kills the pod when it gets there."
                    ),
                    "runbook_url": cfg.runbook_url("HeadroomMemoryFillingUp"),
                },
            }, {
                "exp_labels": {"severity": "critical", **workload("r")},
                "exp_annotations": {
                    "summary": "ns/r is within the noise of its memory limit: one more "
                               "swing like its quiet hours' OOM-kills it.",
                    "description": (
                        "Unreclaimable memory of container vllm of pod ns/r reaches the "
                        "40.4GiB limit in no time a trend gives: its next excursion "
                        "decides; 150MiB are left (99.64% used). Its peaks are 0.15 of "
                        "its quiet hours' swings below the limit (it pages below 0.5). "
                        "What grows: no process or kind recorded. Act now: the kernel "
                        "OOM-kills the pod when it gets there."
                    ),
                    "runbook_url": cfg.runbook_url("HeadroomMemoryFillingUp"),
                },
            }],
        }],
        "promql_expr_test": [
            {"expr": page % "p", "eval_time": dur(fires - LONG_STEP), "exp_samples": []},
            {"expr": page % "r", "eval_time": dur(fires - LONG_STEP), "exp_samples": []},
            # The pod that does not grow has no time to limit: the band alone pages it.
            {"expr": f'{q.TIME_TO_LIMIT}{{pod="r"}}', "eval_time": dur(fires),
             "exp_samples": []},
            {"expr": page % "p", "eval_time": dur(fires), "exp_samples": [{
                "labels": alert_labels("HeadroomMemoryFillingUp", "critical", "vllm"),
                "value": 1}]},
            # The lasting horizon alone says hours: the noise is what pages.
            {"expr": f'{q.TIME_TO_LIMIT}{{pod="p"}} < {cfg.fill_lasting_page_horizon_s}',
             "eval_time": dur(fires), "exp_samples": []},
            # (Two hours on, its lasting horizon pages it as any leak: 2 h left.)
            {"expr": page % "q", "eval_time": dur(fires + 30 * MINUTE), "exp_samples": []},
        ],
    }


def filling_up_to_the_band(cfg: Config) -> Test:
    """Two pods flat for 6 h at 36 GiB of a 40 GiB limit, then climbing 1 GiB an hour:
    one swings 512 MiB from sample to sample (a quiet swing of 1 GiB: its noise band is
    the last 512 MiB, half an hour of the climb), the other does not. The page counts
    its horizon to the band, not to the limit: the noisy pod pages half an hour sooner,
    while its time to limit still reads more than the page horizon; the quiet one pages
    at the horizon. Without the noise, the band is the limit."""
    limit, level, rate = 40 * GiB, 36 * GiB, per_second(GiB) * 24
    climb_from, n = 6 * HOUR, 10 * HOUR // MINUTE
    at = 8 * HOUR + 15 * MINUTE

    def figure(swing: float) -> str:
        return " ".join(str(whole(level + rate * max(0, i * MINUTE - climb_from)
                                  + (swing / 2 if i % 2 else -swing / 2)))
                        for i in range(n))

    inputs = [series("up", f"1x{n}")]
    for pod, swing in (("noisy", 512 * MiB), ("quiet", 0.0)):
        inputs += [series(c.MEMORY_LIMIT_BYTES.name, f"{limit}x{n}", **workload(pod)),
                   series(c.MEMORY_UNRECLAIMABLE_BYTES.name, figure(swing),
                          **workload(pod))]
    page = PAGE_FIRING
    crit = cfg.fill_critical_horizon_s + cfg.fill_critical_for_s
    return {
        "name": "HeadroomMemoryFillingUp critical: the horizon counts to the noise band",
        "interval": "1m",
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": page % "noisy", "eval_time": dur(at), "exp_samples": [{
                "labels": alert_labels("HeadroomMemoryFillingUp", "critical", "vllm"),
                "value": 1}]},
            # ...while its time to limit is still beyond the page horizon.
            {"expr": f'count({q.TIME_TO_LIMIT}{{pod="noisy"}} > {crit})',
             "eval_time": dur(at), "exp_samples": [{"labels": "{}", "value": 1}]},
            {"expr": page % "quiet", "eval_time": dur(at), "exp_samples": []},
            {"expr": page % "quiet", "eval_time": dur(at + HOUR), "exp_samples": [{
                "labels": alert_labels("HeadroomMemoryFillingUp", "critical", "vllm"),
                "value": 1}]},
        ],
    }


def climb_that_stops(cfg: Config) -> Test:
    """A pod flat at 20 GiB of a 32 GiB limit for two hours climbs 10 GiB in 15 minutes
    and holds there, 2 GiB short of the limit, its figure swinging 64 MiB from sample to
    sample. The climb pages while it heads for the limit (the short horizon); once it
    stopped, no horizon holds the page: the slowest half-hour slope reads the finished
    ramp for half an hour after it, but the plateau makes no new high above the quarter
    hour before."""
    limit, level, top = 32 * GiB, 20 * GiB, 30 * GiB
    flat, ramp, held = 120, 15, 90
    n = flat + ramp + held
    noise = 32 * MiB

    def at(i: int) -> float:
        climbed = level + (top - level) * min(1.0, max(0, i - flat) / ramp)
        return climbed + (noise if i % 2 else -noise) * (i > flat + ramp)

    inputs = [series("up", f"1x{n}"),
              series(c.MEMORY_LIMIT_BYTES.name, f"{limit}x{n}", **workload()),
              series(c.MEMORY_UNRECLAIMABLE_BYTES.name,
                     " ".join(str(whole(at(i))) for i in range(n + 1)), **workload())]
    medium = f'count({q.GROWTH}{{horizon="medium"}})'
    return {
        "name": "HeadroomMemoryFillingUp critical: the page of a climb that stopped short "
                "of the limit clears, and no horizon holds it",
        "interval": "1m",
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": PAGE_FIRING % "p", "eval_time": f"{flat + ramp}m", "exp_samples": [{
                "labels": alert_labels("HeadroomMemoryFillingUp", "critical", "vllm"),
                "value": 1}]},
            *({"expr": PAGE_FIRING % "p", "eval_time": f"{m}m", "exp_samples": []}
              for m in range(flat + ramp + 20, n, 5)),
            *({"expr": medium, "eval_time": f"{m}m", "exp_samples": []}
              for m in range(flat + ramp + 15, n, 5)),
        ],
    }


def reclaim(cfg: Config) -> Test:
    limit = 32 * GiB
    on = 30
    fires = on * MINUTE + cfg.reclaim_for_s
    w = workload()
    return {
        "name": "HeadroomMemoryReclaimAtLimit: for elapses, only when unreclaimable is high",
        "interval": "1m",
        "input_series": [
            series(c.MEMORY_LIMIT_BYTES.name, f"{limit}x90", **w),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, steps((0.5 * limit, on), (0.9 * limit, 61)),
                   **w),
            series(c.MEMORY_EVENTS_TOTAL.name, "0+500x90", **w, event=c.EVENT_MAX),
            # Same reclaim on a pod full of page cache: no alert.
            series(c.MEMORY_LIMIT_BYTES.name, f"{limit}x90", **workload("q")),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, f"{whole(0.4 * limit)}x90", **workload("q")),
            series(c.MEMORY_EVENTS_TOTAL.name, "0+5000x90", **workload("q"), event=c.EVENT_MAX),
            series("up", "1x90"),
        ],
        "promql_expr_test": boundary("HeadroomMemoryReclaimAtLimit", "warning", "vllm", fires),
    }


def hidden(cfg: Config) -> Test:
    # Unmapped shmem grows ~1 GiB/day at the pod level while process memory is flat. The
    # pod limit is 200 GiB (1% = 2 GiB above the rise) until 2d2h, then 32 GiB.
    rate = per_second(GiB)
    on = 2 * DAY + 2 * HOUR
    total = on + 2 * HOUR
    n_on, n = on // LONG_STEP, total // LONG_STEP + 1
    procs = 10 * GiB
    pod = workload(container="")
    return {
        "name": "HeadroomHiddenMemoryGrowth: for elapses",
        "interval": dur(LONG_STEP),
        "input_series": [
            series(c.MEMORY_LIMIT_BYTES.name, steps((200 * GiB, n_on), (32 * GiB, n - n_on)),
                   **pod),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, linear(procs + GiB, rate * LONG_STEP, n),
                   **pod),
            series(c.MEMORY_LIMIT_BYTES.name, f"{32 * GiB}x{n}", **workload()),
            series(c.MEMORY_UNRECLAIMABLE_BYTES.name, f"{procs}x{n}", **workload()),
            series(c.PROCESS_MEMORY_BYTES.name, f"{6 * GiB}x{n}", **workload(),
                   process="Worker_TP0",
               kind=c.RSS_ANON),
            series(c.PROCESS_MEMORY_BYTES.name, f"{4 * GiB}x{n}", **workload(),
                   process="Worker_TP0",
               kind=c.RSS_SHMEM),
            series("up", f"1x{n}"),
        ],
        "promql_expr_test": [
            *boundary("HeadroomHiddenMemoryGrowth", "warning", "", on + cfg.hidden_for_s,
                      LONG_STEP),
            # The container's own memory is all accounted for by its process.
            {"expr": 'headroom:memory_hidden:bytes{container="vllm"}', "eval_time": "1h",
             "exp_samples": [{"labels": 'headroom:memory_hidden:bytes{container="vllm", '
                                        'namespace="ns", pod="p"}', "value": 0}]},
        ],
    }


def weekly_pattern(cfg: Config) -> Test:
    """Five weekdays at 24 GiB, a weekend at 16 GiB, back to 24 GiB over Monday (a 32 GiB
    limit): on Tuesday the floor and the peaks have risen day over day (3.7 GiB a day:
    two days to the limit), but only back to last week's weekday floor
    (``HIGHEST_FLOOR``): no lasting growth, no ticket. Its twin was OOM-killed as the
    weekend began: the floors before a kill are no pattern, so the same return is growth
    and tickets. A third pod leaks 0.5 GiB a day under the same pattern: on Wednesday
    its floor's rise is read from Friday's floor (the highest of the week, the floor a
    day ago is Monday's climb back), over the four and a half days since
    (``HIGHEST_FLOOR_SINCE``): its rate, not four and a half times it. A fourth leaks 3
    GiB a day under a 128 GiB limit and outran the weekend's drop: on Wednesday the floor
    a day ago (Monday's climb back) is the week's highest, and the rise from it is a
    day's leak and the rest of the drop; the whole floor five days ago is one a later
    floor fell below (``FLOOR_RISE_PAST_FALL``), and from it the rise is the leak's.

    On Tuesday the third pod's floor is below Friday's (Monday's climb is in its
    window) and its peaks alone rose a day running above last week's highest by more
    than half the day's rise: the peaks-only branch of the lasting rate. The day's rise
    is the weekend's return (up to 3.5 GiB a day: the pod ticketed from 04:00, its forecast
    25-64 h to a limit a week away); the rise above Friday's peaks over the days since the
    envelope last held them (``HIGHEST_ENVELOPE_SINCE``) is the leak's, read up to half
    again: no ticket all Tuesday."""
    weekday, weekend, limit, leak = 24 * GiB, 16 * GiB, 32 * GiB, GiB // 2
    per_day = DAY // LONG_STEP
    n = 10 * per_day
    fast, big = 3 * GiB, 128 * GiB

    def leaking(per_day_leak: int) -> str:
        # The weekly pattern with a leak over it (none: the pattern alone).
        step = round(per_day_leak / per_day)
        return " ".join((
            linear(weekday, step, 5 * per_day),
            linear(weekend + 5 * per_day * step, step, 2 * per_day),
            linear(weekend + 7 * per_day * step, round((weekday - weekend) / per_day) + step,
                   per_day),
            linear(weekday + 8 * per_day * step, step, 2 * per_day)))

    kill_at = 5 * per_day
    inputs = [series("up", f"1x{n - 1}")]
    for pod, memory, pod_limit in (("w", leaking(0), limit), ("k", leaking(0), limit),
                                   ("l", leaking(leak), limit), ("f", leaking(fast), big)):
        inputs += [series(c.MEMORY_LIMIT_BYTES.name, f"{pod_limit}x{n - 1}", **workload(pod)),
                   series(c.MEMORY_UNRECLAIMABLE_BYTES.name, memory, **workload(pod))]
    inputs.append(series(c.MEMORY_EVENTS_TOTAL.name, steps((0, kill_at), (1, n - kill_at)),
                         **workload("k"), event=c.EVENT_OOM_KILL))
    tuesday = 8 * DAY + 12 * HOUR
    lasting = f'count({q.GROWTH}{{horizon="lasting", pod="%s"}})'
    ticket = ('count by (pod) (ALERTS{alertstate="firing", alertname="HeadroomMemoryFillingUp", '
              'severity="warning", pod=~"w|k|l"})')
    l_ticket = ('count(max_over_time(ALERTS{alertstate="firing", '
                'alertname="HeadroomMemoryFillingUp", pod="l"}[36h]))')
    l_rate = (f'count({q.GROWTH}{{horizon="lasting", pod="l"}} * {DAY}'
              f' > {0.9 * leak} < {1.5 * leak})')
    return {
        "name": "HeadroomMemoryFillingUp warning: a weekly pattern is no growth, unless a "
                "kill came since",
        "interval": dur(LONG_STEP),
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": lasting % "w", "eval_time": dur(tuesday), "exp_samples": []},
            {"expr": lasting % "k", "eval_time": dur(tuesday),
             "exp_samples": [{"labels": "{}", "value": 1}]},
            {"expr": ticket, "eval_time": dur(tuesday),
             "exp_samples": [{"labels": '{pod="k"}', "value": 1}]},
            {"expr": l_rate, "eval_time": dur(tuesday - 6 * HOUR),
             "exp_samples": [{"labels": "{}", "value": 1}]},
            {"expr": l_ticket, "eval_time": dur(tuesday + DAY), "exp_samples": []},
            {"expr": f'count({q.UNRECLAIMABLE_BASELINE_RISE}{{pod="l"}}'
                     f' > {0.9 * leak} < {1.1 * leak})',
             "eval_time": dur(tuesday + DAY), "exp_samples": [{"labels": "{}", "value": 1}]},
            {"expr": f'count({q.UNRECLAIMABLE_BASELINE_RISE}{{pod="f"}}'
                     f' > {0.9 * fast} < {1.1 * fast})',
             "eval_time": dur(tuesday + DAY), "exp_samples": [{"labels": "{}", "value": 1}]},
        ],
    }


def growing_batch(cfg: Config) -> Test:
    """A nightly batch over a flat 16 GiB floor under a 29 GiB limit (from 02:00, ramped
    up over 15 minutes, 25 minutes at its peak), the peak 2 GiB higher each night: 22,
    24, 26, 28 GiB. The floor never rises; the peaks have risen two days running above
    every peak before: lasting growth of 2 GiB a day, a ticket, and the page two hours
    before the fifth night's batch (yesterday's peak plus a day's growth reaches the
    limit within two hours). The fourth night's batch pages not: it climbs where the
    pattern puts it. Its twin runs the same batch at 26 GiB every night: no growth, no
    alert."""
    limit, floor = 29 * GiB, 16 * GiB
    per_day, start, length = DAY // LONG_STEP, 2 * HOUR // LONG_STEP, 40 * MINUTE // LONG_STEP
    nights = 4
    end = nights * DAY + 2 * HOUR  # the fifth batch would cross: the data stops before it
    n = end // LONG_STEP + 1

    def figure(peak: Callable[[int], float], less: float = 0.0) -> str:
        # Each batch ramps up over 15 minutes (a climb the medium horizon reads); less
        # is what the cgroup holds outside the series (a process's share).
        runs = [(v - less, m) for k in range(nights) for v, m in (
            (floor, start), *((floor + (peak(k) - floor) * i / 4, 1) for i in (1, 2, 3)),
            (peak(k), length - 3), (floor, per_day - start - length))]
        return steps(*runs, (floor - less, n - nights * per_day))

    inputs = [series("up", f"1x{n - 1}")]
    for pod, peak in (("g", lambda k: (22 + 2 * k) * GiB), ("c", lambda k: 26 * GiB)):
        inputs += [series(c.MEMORY_LIMIT_BYTES.name, f"{limit}x{n - 1}", **workload(pod)),
                   series(c.MEMORY_UNRECLAIMABLE_BYTES.name, figure(peak), **workload(pod)),
                   # The batch is EngineCore's anon memory; the API server's is flat.
                   series(c.PROCESS_MEMORY_BYTES.name, figure(peak, 6 * GiB),
                          **workload(pod), process="EngineCore", kind=c.RSS_ANON),
                   series(c.PROCESS_MEMORY_BYTES.name, f"{2 * GiB}x{n - 1}", **workload(pod),
                          process="APIServer", kind=c.RSS_ANON),
                   series(c.MEMORY_BYTES.name, figure(peak, 4 * GiB),
                          **workload(pod), kind=c.KIND_ANON)]
    lasting = f'count by (pod) ({q.GROWTH}{{horizon="lasting"}})'
    alerts = ('count by (pod, severity) (ALERTS{alertstate="firing", '
              'alertname="HeadroomMemoryFillingUp"})')
    third_day = 3 * DAY + 12 * HOUR
    # The two-hour pattern window holds the fourth batch's peak (from 02:15) from 00:15
    # of the fifth day: the lasting horizon reads "within 2 h", which pages.
    pattern = nights * DAY + 15 * MINUTE
    return {
        "name": "HeadroomMemoryFillingUp: a nightly batch whose peaks grow over a flat "
                "floor tickets, and pages two hours before the batch that crosses",
        "interval": dur(LONG_STEP),
        "input_series": inputs,
        "promql_expr_test": [
            {"expr": lasting, "eval_time": dur(third_day),
             "exp_samples": [{"labels": '{pod="g"}', "value": 1}]},
            {"expr": alerts, "eval_time": dur(third_day),
             "exp_samples": [{"labels": '{pod="g", severity="warning"}', "value": 1}]},
            # A batch that comes once a night has no teeth: its peak recurs at its hour
            # (the daily pattern's to forecast), so the peaks' own forecast carries the
            # envelope on by an hour of trend only, not by the 7 h since the last batch.
            {"expr": f"round(({q.PEAK_CARRIED} - {q.PEAK_ENVELOPE})"
                     f" / on (namespace, pod, container) {q.GROWTH}{{horizon=\"lasting\"}})",
             "eval_time": dur(third_day),
             "exp_samples": [{"labels": f"{{{_labels(workload('g'))}}}", "value": 3600}]},
            # The fourth batch, at 28 GiB, climbs a day of the trend above the third:
            # the pattern, not a climb to page (only a rising floor makes it one sooner).
            *({"expr": PAGE_FIRING % "g", "eval_time": dur(at), "exp_samples": []}
              for at in (3 * DAY + 2 * HOUR + k * LONG_STEP for k in range(5, 13))),
            {"expr": PAGE_FIRING % "g", "eval_time": dur(pattern - LONG_STEP),
             "exp_samples": []},
            {"expr": alerts, "eval_time": dur(pattern + cfg.fill_critical_for_s + LONG_STEP),
             "exp_samples": [{"labels": '{pod="g", severity="critical"}', "value": 1},
                             {"labels": '{pod="g", severity="warning"}', "value": 1}]},
            # What grows is in the peaks: EngineCore's anon memory, 2 GiB a day (the hour
            # before the batch is the flat floor on both days).
            {"expr": f"count by (kind, process) ({q.TOP_GROWER}{{pod=\"g\"}}"
                     f" > {per_second(1.9 * GiB)} < {per_second(2.1 * GiB)})",
             "eval_time": dur(pattern + cfg.fill_critical_for_s + LONG_STEP),
             "exp_samples": [{"labels": f'{{kind="{c.KIND_ANON}", process="EngineCore"}}',
                              "value": 1}]},
        ],
    }
