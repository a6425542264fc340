"""Metric families -> Prometheus text 0.0.4 or OpenMetrics 1.0.

client_python's custom-collector pattern (nothing registered globally, nothing mutated
between scrapes, so a series that disappears from the host disappears here), with a leaner
representation: a node with 100 containers has thousands of series, and client_python's
Metric objects and generic encoder cost more CPU than reading the host (measured in
benchmarks/encoder_vs_client_python.py). The output is checked against client_python's
parsers (tests/test_golden.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from exporter.catalog import MetricSpec
from exporter.host.logs import escape_control

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@dataclass
class Family:
    """One metric family: its spec and samples as (rendered label pairs, value).

    Label pairs are rendered once (``a="x",b="y"``, escaped) so that a workload's three
    labels are formatted once per scrape, not once per sample.
    """

    spec: MetricSpec
    samples: list[tuple[str, float]] = field(default_factory=list)

    def add(self, labels: Sequence[str], value: float) -> None:
        self.samples.append((label_pairs(self.spec.labels, labels), value))

    def add_to(self, prefix: str, value: float, *labels: str) -> None:
        """A sample whose leading labels are already rendered (``prefix``, e.g. a
        workload's three); ``labels`` are the values of the spec's remaining labels."""
        if len(labels) == 1:  # the common case, kept cheap: thousands per scrape
            tail = f'{self.spec.labels[-1]}="{escape_label(labels[0])}"'
            prefix = f"{prefix},{tail}" if prefix else tail
        elif labels:
            names = self.spec.labels[len(self.spec.labels) - len(labels):]
            prefix = extend(prefix, names, labels)
        self.samples.append((prefix, value))


def extend(prefix: str, names: Sequence[str], values: Sequence[str]) -> str:
    """Rendered label pairs ``prefix`` followed by more."""
    more = label_pairs(names, values)
    return f"{prefix},{more}" if prefix and more else prefix or more


def label_pairs(names: Sequence[str], values: Sequence[str]) -> str:
    return ",".join([f'{n}="{escape_label(v)}"' for n, v in zip(names, values, strict=True)])


def format_value(v: float) -> str:
    """Integers as integers (byte counts read better), other floats shortest round-trip."""
    if isinstance(v, int):
        return str(v)
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def escape_label(value: str) -> str:
    """The exposition's escapes, after the last line of defence against hostile values:
    control (but newline, which the format escapes), bidi-override and undecodable
    characters (a lone surrogate would make the whole body unencodable, a 500 for every
    scrape) become visible escapes. Sources bound lengths where values enter
    (labels.bounded)."""
    if not value.isascii() or not value.isprintable():
        value = escape_control(value, keep_newline=True)  # the format escapes \n itself
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def encode_families(families: Iterable[Family], openmetrics: bool = False) -> bytes:
    """Prometheus text format 0.0.4, or OpenMetrics 1.0 (counter families named without
    ``_total``, a trailing ``# EOF``). Empty families are left out."""
    out: list[str] = []
    for fam in families:
        if not fam.samples:
            continue
        spec = fam.spec
        sample_name = spec.name
        family_name = spec.family if openmetrics else spec.name
        out.append(f"# HELP {family_name} {_escape_help(spec.help)}\n"
                   f"# TYPE {family_name} {spec.type if spec.type != 'info' else 'gauge'}\n")
        for pairs, value in fam.samples:
            if pairs:
                out.append(f"{sample_name}{{{pairs}}} {format_value(value)}\n")
            else:
                out.append(f"{sample_name} {format_value(value)}\n")
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode()


def encode(families: list[Family], accept: str | None) -> tuple[bytes, str]:
    """Prometheus text by default; OpenMetrics when the scraper asks for it."""
    if accept and "application/openmetrics-text" in accept:
        return encode_families(families, openmetrics=True), OPENMETRICS_CONTENT_TYPE
    return encode_families(families), TEXT_CONTENT_TYPE
