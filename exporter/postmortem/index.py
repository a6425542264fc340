"""The HTML ``/debug/oom/`` index from a cache (docs/threats.md: index-burst; every
request parsed every stored document, 1.5 s with 50 of them, and 40 concurrent requests
made a scrape's discovery collector time out).

A row needs four fields of a document, so each document is parsed once for its row,
keyed by its name and its file's (inode, size, mtime); the page is kept while the
directory's listing and every stamp stay the same. Bounds per request: one ``scandir``
of the directory with a ``stat`` per entry, the newest ``max_rows`` documents, and at most
``parses`` documents read and parsed (the others show by name until a later request).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

from exporter.postmortem.page import render_index

Stamp = tuple[int, int, int] | None  # (inode, size, mtime ns); None: held in memory
Row = dict[str, Any]  # the fields of a document that its index row draws


class Documents(Protocol):
    def stamps(self) -> Mapping[str, Stamp]: ...

    def get(self, name: str) -> dict[str, Any] | None: ...


def _scalar(x: object) -> object:
    return x if isinstance(x, (str, int, float)) and not isinstance(x, bool) else None


def row_of(doc: Mapping[str, Any] | None) -> Row:
    """What ``render_index`` reads of a document, and nothing else (a row stays small
    whatever the document holds)."""
    if not isinstance(doc, Mapping):
        return {}
    victim = doc.get("victim")
    process = _scalar(victim.get("process")) if isinstance(victim, Mapping) else None
    row: Row = {k: v for k in ("time", "namespace", "pod", "container")
                if (v := _scalar(doc.get(k))) is not None}
    if process is not None:
        row["victim"] = {"process": process}
    return row


class IndexCache:
    def __init__(self, max_rows: int = 50, parses: int = 10) -> None:
        self.max_rows = max_rows
        self.parses = parses
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, Stamp], Row] = {}
        self._key: tuple[tuple[str, Stamp], ...] | None = None
        self._page = ""
        self.parsed = 0  # documents read and parsed since start (for tests, benchmarks)

    def page(self, docs: Documents) -> str:
        """Blocking (a directory listing, maybe some reads): call from a worker thread."""
        with self._lock:
            stamps = docs.stamps()
            newest = sorted(stamps, reverse=True)[: self.max_rows]
            key = tuple((n, stamps[n]) for n in newest)
            if key == self._key:
                return self._page
            budget = self.parses
            rows: dict[tuple[str, Stamp], Row] = {}
            entries: list[tuple[str, Row | None]] = []
            for k in key:
                row = self._rows.get(k)
                if row is None and budget > 0:
                    budget -= 1
                    self.parsed += 1
                    row = row_of(docs.get(k[0]))
                if row is not None:
                    rows[k] = row
                entries.append((k[0], row))
            self._rows = rows  # only the listed ones: bounded by max_rows
            page = render_index(entries)
            complete = len(rows) == len(key)
            self._key, self._page = (key, page) if complete else (None, "")
            return page
