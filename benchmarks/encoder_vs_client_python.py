"""Our exposition encoder against client_python's, on a node-sized set of families (a
benchmark, not a test): ``exporter/exposition/encode.py`` says why it does not use client_python's
Metric objects and encoder; this measures it.

    python3 -m benchmarks.encoder_vs_client_python [--containers 100] [--rounds 30]

Both sides start from the same figures and produce the same samples (checked with
client_python's parser); client_python's side builds its metric families through a custom
collector, as an exporter using it would on every scrape.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from exporter import catalog as c
from exporter.catalog import MetricSpec
from exporter.exposition.encode import Family, encode_families, label_pairs

Row = tuple[MetricSpec, tuple[str, ...], float]


def node(containers: int) -> list[Row]:
    """The figures of a node: per container the memory families, 4 kinds of 3 process
    names, events and PSI; about 30 series per container."""
    rows: list[Row] = []
    for i in range(containers):
        w = (f"ns-{i % 7}", f"pod-{i // 3}", f"container-{i % 3}")
        for spec in (c.MEMORY_LIMIT_BYTES, c.MEMORY_USAGE_BYTES, c.MEMORY_WORKING_SET_BYTES,
                     c.MEMORY_UNRECLAIMABLE_BYTES, c.MEMORY_PEAK_BYTES):
            rows.append((spec, w, float(1 << 30) + i))
        for kind in c.MEMORY_KINDS:
            rows.append((c.MEMORY_BYTES, (*w, kind), float(i * 4096)))
        for event in ("high", "max", "oom", "oom_kill"):
            rows.append((c.MEMORY_EVENTS_TOTAL, (*w, event), float(i)))
        for process in ("APIServer", "EngineCore", "Worker_TP0"):
            for kind in c.PROCESS_MEMORY_KINDS:
                rows.append((c.PROCESS_MEMORY_BYTES, (*w, process, kind), float(i * 8192)))
    return rows


def ours(rows: list[Row]) -> bytes:
    """As render.py does it: a workload's three labels are rendered once, the rest of each
    label set is appended (``Family.add_to``)."""
    families: dict[str, Family] = {}
    prefix: tuple[str, ...] = ()
    rendered = ""
    for spec, labels, value in rows:
        fam = families.get(spec.name)
        if fam is None:
            fam = families[spec.name] = Family(spec)
        if labels[:3] != prefix:
            prefix, rendered = labels[:3], label_pairs(c.WORKLOAD_LABELS, labels[:3])
        fam.add_to(rendered, value, *labels[3:])
    return encode_families(families.values())


class _Rows(Collector):
    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for spec, labels, value in self.rows:
            fam = families.get(spec.name)
            if fam is None:
                cls = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
                fam = families[spec.name] = cls(spec.family, spec.help, labels=spec.labels)
            fam.add_metric(list(labels), value)
        yield from families.values()


def client_python(rows: list[Row]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Rows(rows))
    return generate_latest(registry)


def samples(body: bytes) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {(s.name, tuple(sorted(s.labels.items())), s.value)
            for f in text_string_to_metric_families(body.decode()) for s in f.samples}


def timed(fn: Callable[[list[Row]], bytes], rows: list[Row], rounds: int) -> float:
    runs = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(rows)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--containers", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    rows = node(args.containers)
    assert samples(ours(rows)) == samples(client_python(rows)), "not the same samples"
    a, b = timed(ours, rows, args.rounds), timed(client_python, rows, args.rounds)
    print(f"{len(rows)} series ({args.containers} containers), median of {args.rounds}")
    print(f"exporter/exposition/encode.py   {a * 1000:7.2f} ms")
    print(f"client_python        {b * 1000:7.2f} ms   ({b / a:.1f}x)")


if __name__ == "__main__":
    main()
