"""OOM post-mortem documents: one JSON document per kill, kept in memory (the newest
``max_documents``) and, with ``--flight-recorder.dir``, written there too; served at
``/debug/oom/`` and announced by one structured log line."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exporter.oom.watcher import OomKill
from exporter.postmortem.docdir import DocumentDir

log = logging.getLogger("exporter.postmortem")

KIND = "headroom.oom_kill/v1"


def document_name(k: OomKill) -> str:
    """``<UTC time>-<namespace>-<pod>-<container>-<ms>.json``; each part at most 60
    characters of [A-Za-z0-9_.-], so a name stays under NAME_MAX with room for the
    store's ``-N`` suffix (an 80-character tracked cgroup path made it too long)."""
    return (f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(k.time))}-"
            f"{_safe(k.workload.namespace or 'host')}-{_safe(k.workload.pod)}-"
            f"{_safe(k.workload.container or 'pod')}-{int(k.time * 1000) % 1000:03d}.json")


def kill_document(k: OomKill, window: float, history: Mapping[str, Any],
                  pod_level: Mapping[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": KIND,
        "time": k.time,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(k.time)),
        "namespace": k.workload.namespace, "pod": k.workload.pod,
        "container": k.workload.container, "cgroup": "/" + k.cgroup,
        "victim": {"process": k.process, "pid": k.pid, "source": k.victim_source},
        "window_seconds": window,
        **history,
    }
    if pod_level is not None:
        doc["pod_level"] = dict(pod_level)
    return doc


class DocumentStore:
    """The newest ``max_documents`` in memory, and on disk through a ``DocumentDir`` (one
    directory descriptor, O_EXCL|O_NOFOLLOW temporaries, never replacing or following
    what it finds, pruning and serving only its own regular files: docs/threats.md,
    the flight-recorder directory)."""

    def __init__(self, directory: Path | None, max_documents: int = 50) -> None:
        self.directory = directory
        self.max_documents = max_documents
        self._dir = DocumentDir(directory, max_documents) if directory is not None else None
        self._lock = threading.Lock()
        self._documents: deque[tuple[str, dict[str, Any]]] = deque(maxlen=max_documents)

    def publish(self, k: OomKill, doc: dict[str, Any]) -> None:
        name = self._unique(document_name(k))
        where = f"/debug/oom/{name}"
        if self._dir is not None:
            try:
                name = self._dir.write(
                    name, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
                where = str(self._dir.path / name)
            except OSError as exc:  # a full disk, a read-only volume: kept in memory
                log.error("cannot write OOM document to %s: %s (kept in memory, served at "
                          "/debug/oom/%s)", self.directory, exc.strerror or exc, name)
        with self._lock:
            self._documents.append((name, doc))
        log.warning(
            "OOM kill in %s/%s/%s: %s (pid %s, from %s); flight recorder: %s",
            k.workload.namespace, k.workload.pod, k.workload.container, k.process, k.pid,
            k.victim_source, where,
            extra={"fields": {"event": "oom_kill", "namespace": k.workload.namespace,
                              "pod": k.workload.pod, "container": k.workload.container,
                              "process": k.process, "pid": k.pid, "document": where}},
        )

    def _unique(self, name: str) -> str:
        """Not the name of a document kept in memory (two kills of one workload in one
        millisecond, or one whose write failed): the store adds ``-N`` on disk too."""
        with self._lock:
            taken = {n for n, _ in self._documents}
        stem, candidate, i = name[: -len(".json")], name, 0
        while candidate in taken:
            i += 1
            candidate = f"{stem}-{i}.json"
        return candidate

    def names(self) -> list[str]:
        with self._lock:
            names = {n for n, _ in self._documents}
        if self._dir is not None:
            names |= set(self._dir.names())
        return sorted(names)

    def stamps(self) -> dict[str, tuple[int, int, int] | None]:
        """Every document's name -> its file's (inode, size, mtime in ns), or None for
        one held in memory (never changed once published)."""
        with self._lock:
            out: dict[str, tuple[int, int, int] | None] = {n: None for n, _ in self._documents}
        if self._dir is not None:
            for name, st in self._dir.stamps().items():
                out.setdefault(name, st)
        return out

    def get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            for n, doc in self._documents:
                if n == name:
                    return doc
        if self._dir is None:
            return None
        data = self._dir.read(name)
        if data is None:
            return None
        try:
            loaded = json.loads(data)
        except ValueError:
            return None
        return loaded if isinstance(loaded, dict) else None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:60] or "_"
