"""Writing PromQL: one way to write a selector, a duration, a number and a template."""

from __future__ import annotations

import string
import textwrap

from exporter.catalog import MetricSpec
from exporter.promql.rules_config import DAY, HOUR, MINUTE


def selector(*matchers: str, **equal: str) -> str:
    """``{a="b", c=~"d"}`` from raw matchers (``'job=~"$job"'``) and exact ones
    (``kind="anon"``); empty raw matchers are skipped, no matcher gives ``""``."""
    parts = [m for m in matchers if m]
    parts += [f'{k}="{v}"' for k, v in equal.items()]
    return "{" + ", ".join(parts) + "}" if parts else ""


def one_of(label: str, *values: str) -> str:
    """``label=~"a|b"``: a matcher for any of ``values`` (catalogue names, not literals)."""
    return f'{label}=~"{"|".join(values)}"'


def series(metric: MetricSpec | str, *matchers: str, **equal: str) -> str:
    """A catalogue metric (or recording-rule name) with a selector."""
    name = metric.name if isinstance(metric, MetricSpec) else metric
    return name + selector(*matchers, **equal)


def by(*labels: str) -> str:
    """``(a, b)`` for ``by``/``on``/``ignoring`` clauses."""
    return "(" + ", ".join(labels) + ")"


def duration(seconds: int) -> str:
    """1d, 12h, 1h30m, 90s -> Prometheus duration text (largest units first)."""
    if seconds <= 0:
        raise ValueError("durations must be positive")
    out = []
    for unit, size in (("d", DAY), ("h", HOUR), ("m", MINUTE), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def number(x: float) -> str:
    """A number PromQL reads, without float noise: 67108864, 0.95, 43200."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def expr(template: str, **values: str | int | float) -> str:
    """A PromQL template with ``${name}`` placeholders, dedented and stripped; numbers are
    written with ``number``. A missing value raises (``string.Template.substitute``)."""
    text = textwrap.dedent(template).strip()
    return string.Template(text).substitute(
        {k: v if isinstance(v, str) else number(v) for k, v in values.items()}
    )
