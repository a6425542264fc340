"""The building blocks every rule module shares: selecting and holding the exporter's
series, the binding cgroup, hysteresis, recording and alerting rules as plain dicts.
"""

from __future__ import annotations

from typing import Any

from exporter import catalog as c
from exporter import promql as q
from exporter.promql import Config, by, duration, expr, series

Rule = dict[str, Any]
Group = dict[str, Any]


def exported(config: Config, metric: c.MetricSpec | str, **equal: str) -> str:
    """A raw exporter series, selected by the config's selector."""
    return series(metric, config.selector, **equal)


def held(config: Config, metric: c.MetricSpec | str, labels: tuple[str, ...],
         **equal: str) -> str:
    """One series per ``labels``, holding its last sample through a scrape gap; the
    largest where two exporter instances overlap (a rollout)."""
    return expr(
        "max by ${by} (last_over_time(${raw}[${hold}]))",
        by=by(*labels), raw=exported(config, metric, **equal), hold=duration(config.hold_s),
    )


def counted(config: Config, raw: str, lookback_s: int, window_s: int) -> str:
    """How far a counter rose: its figure now (held through a gap) above the highest it
    had over ``lookback_s`` ending ``window_s`` ago. A series that is merely new (an
    exporter restart re-reporting past counts, a new instance) has no past and counts
    nothing; a counter that went down and came back counts nothing."""
    return expr(
        "clamp_min(last_over_time(${raw}[${hold}]) - max_over_time(${raw}[${back}] "
        "offset ${w}), 0)",
        raw=raw, hold=duration(config.hold_s), w=duration(window_s),
        back=duration(lookback_s),
    )


def spans(name: str, age_s: int, window_s: int) -> str:
    """Present when ``name`` had a sample ``age_s`` to ``age_s + window_s`` ago: the
    series spans enough history for a slope to mean something (a new series' first
    samples do not). ``window_s`` holds two samples at the slowest evaluation interval."""
    return f"present_over_time({name}[{duration(window_s)}] offset {duration(age_s)})"


def workload_query(config: Config, metric: str, fmt: str, times: str = "") -> str:
    """Go template that prints ``metric`` (times ``times``) for the alert's workload,
    formatted by ``fmt`` (e.g. humanize1024); prints nothing when the series is absent."""
    matchers = ",".join(f"{x}=%q" for x in config.group_labels)
    args = " ".join(f"$labels.{x}" for x in config.group_labels)
    scale = f" * {times}" if times else ""
    return (
        f'{{{{ range printf "{metric}{{{matchers}}}{scale}" {args} | query }}}}'
        f"{{{{ .Value | {fmt} }}}}{{{{ end }}}}"
    )


WHERE = (
    "{{ if $labels.container }}container {{ $labels.container }} of pod "
    "{{ $labels.namespace }}/{{ $labels.pod }}{{ else }}pod {{ $labels.namespace }}/"
    "{{ $labels.pod }} (pod-level cgroup){{ end }}"
)


def binding_clause(config: Config) -> str:
    """The clause that keeps a per-workload condition on the cgroup whose limit binds."""
    return f"and on {by(*config.group_labels)} {q.BINDING} == 1"


def binding(config: Config, condition: str) -> str:
    """``condition`` (per workload) kept only on the cgroup whose limit binds."""
    return expr(
        """
        (
          ${cond}
        )
        ${clause}
        """,
        cond=indent(condition, 2), clause=binding_clause(config),
    )


def hysteresis(config: Config, alert: str, severity: str, fire: str, clear: str,
               labels: tuple[str, ...] | None = None, then: str = "") -> str:
    """Fires on ``fire``; once firing, stays while ``clear`` holds (a looser level): a
    condition that flickers on noise does not resolve a notification and send another.
    ``labels``: what identifies the alert (the group labels unless given). ``then``:
    set-operator clauses (``and ...``, ``unless ...``) fire and clear share, written
    once after both so that Prometheus evaluates them once, not twice."""
    either = expr(
        """
            ${fire}
        or
            (
              ${clear}
            )
          and on ${g}
            ALERTS{alertname="${alert}", severity="${severity}", alertstate="firing"}
        """,
        fire=indent(fire, 4), clear=indent(clear, 6),
        g=by(*(config.group_labels if labels is None else labels)),
        alert=alert, severity=severity,
    )
    if not then:
        return either
    return f"(\n    {indent(either, 4)}\n)\n{then}"


def indent(text: str, n: int) -> str:
    return text.replace("\n", "\n" + " " * n)


def recording_rules(rules_: list[tuple[str, str]], helps: dict[str, str]) -> list[Rule]:
    """Recording rules from (name, expression) pairs, in the order ``helps`` documents
    them; ``NAME\tHORIZON`` records NAME with that horizon label, ``NAME\tLABEL=VALUE``
    with that label."""
    out: list[Rule] = []
    for key, text in rules_:
        name, _, label = key.partition("\t")
        rule: Rule = {"record": name, "expr": text}
        if label:
            k, _, v = label.rpartition("=")
            rule["labels"] = {k or "horizon": v}
        out.append(rule)
    names = [r["record"] for r in out if r["record"] != q.GROWTH or q.GROWTH in helps]
    assert tuple(dict.fromkeys(names)) == tuple(helps), "documented order"
    return out


def alerting_rule(
    config: Config,
    name: str,
    condition: str,
    severity: str,
    for_s: int,
    summary: str,
    description: str,
    keep_firing_s: int | None = None,
) -> Rule:
    """``keep_firing_s``: 0 for none; None for the config's (a gap must not resolve)."""
    rule: Rule = {"alert": name, "expr": condition}
    if for_s:
        rule["for"] = duration(for_s)
    keep = config.keep_firing_s if keep_firing_s is None else keep_firing_s
    if keep:
        rule["keep_firing_for"] = duration(keep)
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": config.runbook_url(name),
    }
    return rule


def min_time_to_limit(config: Config, horizons: str) -> str:
    sel = f'{q.TIME_TO_LIMIT_BY_HORIZON}{{horizon=~"{horizons}"}}'
    return f"min by {by(*config.group_labels)} ({sel})"
