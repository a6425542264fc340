"""The vLLM alerts: a CPU KV-offload tier that will not fit in the memory left, and a
vLLM whose /metrics headroom can no longer read.
"""

from __future__ import annotations

from exporter import promql as q
from exporter.promql import Config, by, duration, expr

from .build import WHERE, Rule, alerting_rule, hysteresis, workload_query


def kv_offload_will_not_fit(config: Config) -> Rule:
    pod = by(*config.pod_labels)
    # vLLM series carry the vLLM container's labels: compare with that container's own
    # headroom and, joined on the pod labels, with the pod-level cgroup's (container="").
    name = "HeadroomKVOffloadWillNotFit"

    def cond(margin: int) -> str:
        return expr(
            """
            ${pending} - ${h} > ${margin}
            or
            ${pending} - on ${pod} group_left () ${h}{container=""} > ${margin}
            """,
            pending=q.KV_OFFLOAD_PENDING, h=q.HEADROOM, pod=pod, margin=margin,
        )

    condition = hysteresis(config, name, "warning", cond(0),
                           cond(-config.owner_tolerance_bytes))
    return alerting_rule(
        config, name, condition, "warning",
        config.kv_offload_for_s,
        "vLLM's CPU KV-offload tier in {{ $labels.namespace }}/{{ $labels.pod }} does "
        "not fit in the memory left.",
        f"The part of the CPU KV-offload tier of {WHERE} not yet in use "
        f"({workload_query(config, q.KV_OFFLOAD_PENDING, 'humanize1024')}B; the whole "
        f"tier when vLLM reports no usage) is larger than the memory left below the "
        f"limit, by {{{{ $value | humanize1024 }}}}B. The pod will be OOM-killed when the "
        f"tier fills, however slowly that happens.",
    )


def vllm_scrape_failing(config: Config) -> Rule:
    # Only a vLLM that answered before: one without a listener (vllm run-batch, a
    # worker-only process) never does, and that is a known state, not a failure.
    condition = expr(
        """
        ${up} < 0.5
        and on ${g}
        last_over_time(${answered}[${hold}])
        """,
        g=by(*config.group_labels), up=q.VLLM_UP, answered=q.VLLM_ANSWERED_LATELY,
        hold=duration(config.lasting_hold_s),
    )
    return alerting_rule(
        config, "HeadroomVLLMScrapeFailing", condition, "warning",
        config.vllm_scrape_for_s,
        "headroom cannot read vLLM's /metrics in {{ $labels.namespace }}/"
        "{{ $labels.pod }}.",
        f"headroom read the /metrics of the vLLM in {WHERE} on only "
        f"{{{{ $value | humanizePercentage }}}} of scrapes over "
        f"{duration(config.vllm_scrape_window_s)}: the KV-cache series and "
        f"HeadroomKVOffloadWillNotFit are blind for it.",
    )
