"""HeadroomNodeMemoryPressure: the node's MemAvailable falling toward the kubelet's
eviction threshold, naming the pods without a limit of their own that grow fastest.
"""

from __future__ import annotations

from exporter import catalog as c
from exporter import promql as q
from exporter.promql import Config, by, duration, expr, number, series

from .build import Rule, alerting_rule, exported, held, hysteresis, spans


def node_memory_pressure(config: Config) -> Rule:
    node = by(*config.node_labels)
    total = held(config, c.NODE_MEMORY_TOTAL_BYTES, config.node_labels)
    name = "HeadroomNodeMemoryPressure"
    fire = expr(
        """
        ${avail} < ${ratio} * ${total}
        and
        predict_linear(${avail}[${w}], ${horizon}) < ${eviction}
        and
        ${spans}
        """,
        avail=q.NODE_AVAILABLE, ratio=config.node_pressure_ratio, total=total,
        w=duration(config.slope_window_s), horizon=config.node_pressure_horizon_s,
        eviction=config.node_eviction_bytes,
        spans=spans(q.NODE_AVAILABLE, config.slope_window_s // 2, config.slope_window_s // 2),
    )
    clear = f"{q.NODE_AVAILABLE} < {number(1.5 * config.node_pressure_ratio)} * {total}"
    condition = hysteresis(config, name, "critical", fire, clear, config.node_labels)
    # The pods without a limit of their own on that node (their effective limit is the
    # node's memory), fastest growing first: the kubelet evicts among them.
    on_node = ", ".join(f"{x}=%q" for x in config.node_labels)
    args = " ".join(f"$labels.{x}" for x in config.node_labels)
    limit = series(c.MEMORY_LIMIT_BYTES, config.selector, 'container=""', on_node)
    ranking = expr(
        "sort_desc(topk(3, ${slope}{container=\"\"} and on ${pod} "
        "(${limit} >= on ${node} group_left () ${no_limit} * ${node_total})))",
        slope=q.SLOPE_MEDIUM, pod=by(*config.pod_labels), limit=limit, node=node,
        no_limit=config.no_limit_ratio,
        node_total=exported(config, c.NODE_MEMORY_TOTAL_BYTES),
    ).replace('"', '\\"')
    growers = (
        f'{{{{ range printf "{ranking}" {args} | query }}}}'
        "{{ .Labels.namespace }}/{{ .Labels.pod }} (+{{ .Value | humanize1024 }}B/s) "
        "{{ end }}"
    )
    return alerting_rule(
        config, name, condition, "critical",
        config.node_pressure_for_s,
        "Node {{ $labels." + config.node_labels[0] + " }} is running out of memory: "
        "pods without a memory limit will be evicted.",
        "MemAvailable of node {{ $labels." + config.node_labels[0] + " }} is "
        "{{ $value | humanize1024 }}B and falling toward the kubelet's eviction "
        f"threshold ({number(config.node_eviction_bytes)} bytes assumed) within "
        f"{duration(config.node_pressure_horizon_s)}. Pods without a memory limit of "
        f"their own, fastest growing first: {growers}",
    )
