"""headroom's Prometheus rules: recording and alerting groups, runbooks and their tests.

``exporter.promql.Config`` holds every knob; the modules per area (``forecast``,
``lasting``, ``memory``, ``tmpfs``, ``node``, ``oom``, ``vllm``, ``meta``) build the rules
from it, ``alerts.rules`` assembles the groups, ``alerts.generate.artifacts`` renders the
files that are committed.
"""
