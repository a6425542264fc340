"""``headroom explain NAMESPACE/POD``: why is this pod close to an OOM kill, in plain words.

Fetches the evidence from Prometheus: the forecast contract's recorded series for the
verdict and the time to limit (the answer the page, the dashboard and ``top`` give; when
the recording rules are not loaded, the same definition computed here from the raw series,
and said so), the exporter's own series for what grows and why. Judges it with
:mod:`exporter.oncall.diagnosis` and prints a diagnosis, or JSON (``--output json``).

Exit codes: 0 healthy, 1 at risk, 2 bad usage, 3 no data
(no series for the pod, or Prometheus could not answer).

The package: :mod:`.queries` (the PromQL), :mod:`.answers` (answers -> evidence),
:mod:`.fetch` (the I/O), :mod:`.command` (flags, exit codes).
"""

from exporter.oncall.diagnosis.text import ansi, to_json, to_text
from exporter.oncall.explain.answers import RANGE_STEP, evidence, histories
from exporter.oncall.explain.command import add_arguments, main, run
from exporter.oncall.explain.fetch import HISTORY_MARGIN, UsageError, fetch, parse_target
from exporter.oncall.explain.queries import pod_queries, range_queries

__all__ = [
    "HISTORY_MARGIN", "RANGE_STEP", "UsageError", "add_arguments", "ansi", "evidence",
    "fetch", "histories", "main", "parse_target", "pod_queries", "range_queries", "run",
    "to_json", "to_text",
]
