"""Every range in the generated rules holds at least two samples on any Prometheus.

Prometheus 3 made range selectors left-open (a sample on the left edge falls out), and
evaluation times fall anywhere relative to scrapes. A range of width W over samples
every I seconds holds floor(W / I) of them at the worst alignment with a closed range,
and floor((W - 1 ms) / I) with a left-open one. Each range must hold two at the slowest
supported scrape and evaluation interval (``SLOWEST_S``), or at the interval of the group
that records the series it reads (the lasting group's). Ranges are found by walking the
parsed expression (promql-parser, the Rust parser), not by a regular expression.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from alerts import generate
from exporter.promql import CONFIG, Config

SLOWEST_S = 120  # the slowest scrape and evaluation interval headroom supports
EDGE_S = 0.001  # Prometheus 3: a sample exactly on the left edge is out


@dataclass(frozen=True)
class Range:
    rule: str
    what: str  # the series a matrix selector reads, or "subquery"
    width_s: float
    interval_s: float  # how far apart its samples may be

    @property
    def worst_samples(self) -> int:
        return math.floor((self.width_s - EDGE_S) / self.interval_s)


def _seconds(text: str) -> float:
    """A Prometheus duration (``1h15m``) in seconds."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    found = re.findall(r"(\d+)([dhms])", text)
    assert "".join(n + u for n, u in found) == text, text
    return float(sum(int(n) * units[u] for n, u in found))


def _intervals(doc: dict[str, Any], config: Config) -> dict[str, float]:
    """Recorded series -> how far apart their samples are (their group's interval, at
    least the slowest evaluation interval)."""
    out: dict[str, float] = {}
    for group in doc["groups"]:
        every = _seconds(group["interval"]) if "interval" in group else SLOWEST_S
        for rule in group["rules"]:
            if "record" in rule:
                out[rule["record"]] = max(every, SLOWEST_S)
    return out


def _walk(node: Any, rule: str, intervals: dict[str, float]) -> Iterator[Range]:
    import promql_parser as p

    if isinstance(node, p.MatrixSelector):
        name = node.vector_selector.name or ""
        width = node.range.total_seconds() if node.range else 0.0
        yield Range(rule, name, width, intervals.get(name, SLOWEST_S))
        return
    if isinstance(node, p.SubqueryExpr):
        step = node.step.total_seconds() if node.step else 0.0
        width = node.range.total_seconds() if node.range else 0.0
        yield Range(rule, "subquery", width, max(step, SLOWEST_S))
        yield from _walk(node.expr, rule, intervals)
        return
    if isinstance(node, p.BinaryExpr):
        yield from _walk(node.lhs, rule, intervals)
        yield from _walk(node.rhs, rule, intervals)
    elif isinstance(node, p.Call):
        for arg in node.args:
            yield from _walk(arg, rule, intervals)
    elif isinstance(node, p.AggregateExpr | p.ParenExpr | p.UnaryExpr):
        yield from _walk(node.expr, rule, intervals)


def ranges(text: str, config: Config = CONFIG) -> list[Range]:
    import promql_parser as p

    doc = yaml.safe_load(text)
    intervals = _intervals(doc, config)
    out: list[Range] = []
    for group in doc["groups"]:
        for rule in group["rules"]:
            name = rule.get("record") or rule["alert"]
            out.extend(_walk(p.parse(rule["expr"]), name, intervals))
    return out


def test_every_range_holds_two_samples_at_the_slowest_interval_either_edge() -> None:
    pytest.importorskip("promql_parser")
    found = ranges(generate.rules_yaml())
    assert len(found) > 40, "the walk finds the rules' ranges"
    short = [r for r in found if r.worst_samples < 2]
    assert not short, "\n".join(
        f"{r.rule}: {r.what}[{r.width_s:g}s] holds {r.worst_samples} sample(s) every "
        f"{r.interval_s:g}s" for r in short)


def test_the_window_check_finds_a_guard_that_holds_a_sample_only_sometimes() -> None:
    """A guard that holds a sample only some of the time: 42 s over a series recorded
    once a minute."""
    pytest.importorskip("promql_parser")
    text = yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "a:b:c", "expr": "up"},
        {"alert": "X", "expr": "present_over_time(a:b:c[42s] offset 6m18s)"},
        {"alert": "Y", "expr": "min_over_time(deriv(up[4m])[4m:])"},
    ]}]})
    worst = {(r.rule, r.what): r.worst_samples for r in ranges(text)}
    assert worst[("X", "a:b:c")] == 0
    assert worst[("Y", "up")] == 1  # 240 s at 120 s: two, unless the left edge is open
    assert worst[("Y", "subquery")] == 1


def test_lasting_series_are_read_at_their_group_interval() -> None:
    pytest.importorskip("promql_parser")
    found = ranges(generate.rules_yaml())
    lasting = [r for r in found if r.what.endswith(":hourly_max")]
    assert lasting and all(r.interval_s == CONFIG.lasting_interval_s for r in lasting)
    floors = [r for r in found if r.what.endswith(":highest_floor")]
    assert floors and all(r.interval_s == CONFIG.floor_memory_interval_s for r in floors)
