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

log = logging.getLogger("exporter.postmortem")

KIND = "headroom.oom_kill/v1"


def document_name(k: OomKill) -> str:
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
    def __init__(self, directory: Path | None, max_documents: int = 50) -> None:
        self.directory = directory
        self.max_documents = max_documents
        self._lock = threading.Lock()
        self._documents: deque[tuple[str, dict[str, Any]]] = deque(maxlen=max_documents)

    def publish(self, k: OomKill, doc: dict[str, Any]) -> None:
        name = document_name(k)
        with self._lock:
            self._documents.append((name, doc))
        path = None
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                path = self.directory / name
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
                tmp.replace(path)
                self._prune()
            except OSError as exc:
                log.error("cannot write OOM document to %s: %s", self.directory, exc)
                path = None
        where = str(path) if path else f"/debug/oom/{name}"
        log.warning(
            "OOM kill in %s/%s/%s: %s (pid %s, from %s); flight recorder: %s",
            k.workload.namespace, k.workload.pod, k.workload.container, k.process, k.pid,
            k.victim_source, where,
            extra={"fields": {"event": "oom_kill", "namespace": k.workload.namespace,
                              "pod": k.workload.pod, "container": k.workload.container,
                              "process": k.process, "pid": k.pid, "document": where}},
        )

    def _prune(self) -> None:
        assert self.directory is not None
        files = sorted(self.directory.glob("*.json"))
        for old in files[: max(0, len(files) - self.max_documents)]:
            old.unlink(missing_ok=True)

    def names(self) -> list[str]:
        with self._lock:
            names = [n for n, _ in self._documents]
        if self.directory is not None and self.directory.is_dir():
            names = sorted(set(names) | {p.name for p in self.directory.glob("*.json")})
        return names

    def get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            for n, doc in self._documents:
                if n == name:
                    return doc
        if self.directory is not None and _safe(name) == name and name.endswith(".json"):
            path = self.directory / name
            if path.is_file():
                loaded: dict[str, Any] = json.loads(path.read_text())
                return loaded
        return None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:80] or "_"
