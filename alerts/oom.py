"""HeadroomPodOOMKilled: an OOM kill happened, from the watcher's counter and the
kernel's memory.events.
"""

from __future__ import annotations

from exporter import catalog as c
from exporter.promql import Config, by, duration, expr

from .build import Rule, alerting_rule, counted, exported


def pod_oom_killed(config: Config) -> Rule:
    pod = config.pod_labels
    w = duration(config.oom_window_s)
    # Per raw series, now minus the highest value it had over the lookback one window
    # ago (a fresh exporter showing 0, then the kills it re-read, counts nothing).
    def kills(raw: str) -> str:
        return counted(config, raw, config.oom_lookback_s, config.oom_window_s)

    # The watcher counts per process, each kill once (exporter/oom/watcher.py says what
    # one kill is); the kernel's oom_kill event per cgroup, the pod-level cgroup's counting
    # every container's too (v2 by itself, v1 as the exporter sums it from the watcher):
    # max over the pod's cgroups, not their sum.
    condition = expr(
        """
        sum by ${pod_p} (${watcher}) > 0
        or on ${pod}
        max by ${pod} (${kernel}) > 0
        """,
        pod_p=by(*pod, "process"), pod=by(*pod),
        watcher=kills(exported(config, c.OOM_KILLS_TOTAL)),
        kernel=kills(exported(config, c.MEMORY_EVENTS_TOTAL, event=c.EVENT_OOM_KILL)),
    )
    return alerting_rule(
        config, "HeadroomPodOOMKilled", condition, "warning", 0,
        "A process of {{ $labels.namespace }}/{{ $labels.pod }} was OOM-killed.",
        "The kernel OOM-killed {{ with $labels.process }}{{ . }}{{ else }}a process"
        "{{ end }} in pod {{ $labels.namespace }}/{{ $labels.pod }} "
        f"({{{{ $value | humanize }}}} kill(s) in the last {w}). Open headroom's OOM "
        "post-mortem for what grew before it.",
        keep_firing_s=0,
    )
