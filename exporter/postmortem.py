"""After an OOM kill the evidence is gone with the container: keep it.

- The **OOM watcher** (driven by the sampler thread, once a second) reads each kill
  domain's counter: v2 ``memory.events`` ``oom_kill`` of the pod-level cgroup
  (hierarchical: kills in any of its containers), v1 ``memory.oom_control`` of each
  container (v1 counts a kill only in the victim's own cgroup), whichever limit was hit.
  The victim comes from the kernel log (``/dev/kmsg``:
  ``oom-kill:...,task_memcg=<cgroup>,task=<comm>,pid=<pid>``) when readable, its full name
  from headroom's last process table; without the kernel log, the largest process of that
  cgroup that is gone is named, marked as a guess.
- The **flight recorder** keeps, per workload, the last ``window`` (15 min) of usage at 1 s
  resolution (the sampler's maximum in each second) and the scrapes' figures (kinds,
  unreclaimable, limit, top processes, vLLM KV usage), in bounded ring buffers.
- On a kill it writes one JSON document (to ``--flight-recorder.dir`` when set, keeping the
  newest ``max_documents``), serves it at ``/debug/oom/``, counts it in
  ``headroom_oom_kills_total`` and logs one structured line.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.join import Snapshot
from exporter.model import Workload
from exporter.paths import MemoryHierarchy

log = logging.getLogger(__name__)

UNKNOWN = "unknown"
GUESS_WAIT = 2.0  # seconds to wait for a killed process to vanish before naming none


# --- the kernel log --------------------------------------------------------------------

_OOM_KILL_RE = re.compile(r"oom-kill:.*?task_memcg=(?P<memcg>[^,]*),task=(?P<comm>[^,]*),"
                          r"pid=(?P<pid>\d+)")
_KILLED_RE = re.compile(r"Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)")


@dataclass(frozen=True)
class KernelVictim:
    pid: int
    comm: str
    memcg: str  # relative to the memory hierarchy root, no leading slash ("" if unknown)
    line: str


def parse_kmsg_record(record: str) -> KernelVictim | None:
    """One /dev/kmsg record (``prio,seq,usec,flags;message``) -> the OOM victim, if any."""
    _, _, message = record.partition(";")
    message = message.split("\n", 1)[0]
    m = _OOM_KILL_RE.search(message)
    if m:
        return KernelVictim(int(m["pid"]), m["comm"], m["memcg"].strip("/"), message)
    m = _KILLED_RE.search(message)
    if m:
        return KernelVictim(int(m["pid"]), m["comm"], "", message)
    return None


class KmsgReader:
    """Non-blocking reader of new /dev/kmsg records (history is skipped at open)."""

    def __init__(self, path: Path | None) -> None:
        self._fd: int | None = None
        if path is None:
            return
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as exc:
            log.info("kernel log %s not readable (%s): OOM victims are inferred", path,
                     exc.strerror)
            self._fd = None

    @property
    def available(self) -> bool:
        return self._fd is not None

    def read_victims(self) -> list[KernelVictim]:
        out: list[KernelVictim] = []
        if self._fd is None:
            return out
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: go on
                    continue
                raise
            if not record:
                return out
            victim = parse_kmsg_record(record.decode("utf-8", "replace"))
            if victim is not None:
                out.append(victim)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# --- the flight recorder ----------------------------------------------------------------


@dataclass
class _Track:
    usage: deque[tuple[float, int]]
    scrapes: deque[tuple[float, str]]  # (time, compact JSON): a few hundred bytes each


class FlightRecorder:
    """Bounded history per cgroup path. Thread-safe (sampler thread and event loop).

    Memory: per cgroup, ``window`` seconds of (time, usage) pairs and at most
    ``scrape_slots`` scrapes of the last ``window``, each kept as compact JSON."""

    def __init__(self, window: float, scrape_slots: int = 120,
                 clock: Callable[[], float] = time.time) -> None:
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._tracks: dict[str, _Track] = {}
        self._usage_slots = int(window) + 1  # one per second
        self._scrape_slots = scrape_slots
        # Scrapes closer than this are not kept: 60 per window is plenty for a post-mortem,
        # and it bounds memory and CPU whatever the scrape rate.
        self.scrape_spacing = window / 60
        self._last_scrape = -1e18

    def _track(self, path: str) -> _Track:
        t = self._tracks.get(path)
        if t is None:
            t = self._tracks[path] = _Track(deque(maxlen=self._usage_slots),
                                            deque(maxlen=self._scrape_slots))
        return t

    def record_usage(self, readings: Mapping[str, int]) -> None:
        now = self._clock()
        second = float(int(now))
        with self._lock:
            for path, usage in readings.items():
                q = self._track(path).usage
                if q and q[-1][0] == second:
                    if usage > q[-1][1]:
                        q[-1] = (second, usage)  # keep the second's maximum
                else:
                    q.append((second, usage))

    def record_scrape(self, snapshot: Snapshot, top: int = 5) -> None:
        now = self._clock()
        if now - self._last_scrape < self.scrape_spacing:
            return
        self._last_scrape = now
        vllm = snapshot.extra.get("vllm")
        kv: dict[Workload, list[dict[str, Any]]] = {}
        for r in vllm if isinstance(vllm, list) else []:
            if r.stats is not None:
                kv.setdefault(r.target.workload, []).extend(
                    {"model_name": e.model_name, "engine": e.engine,
                     "kv_usage_ratio": dict(e.usage_ratio), "requests": dict(e.requests)}
                    for e in r.stats.engines)
        with self._lock:
            live = set()
            for ws in snapshot.workloads:
                live.add(ws.ref.path)
                if ws.memory is None:
                    continue
                m = ws.memory
                procs = sorted(ws.processes, key=lambda g: -(g.rss_anon + g.rss_shmem))[:top]
                entry: dict[str, Any] = {
                    "time": now, "usage": m.usage, "limit": m.limit,
                    "unreclaimable": m.unreclaimable, "working_set": m.working_set,
                    "kinds": dict(m.kinds), "events": dict(m.events),
                    "processes": [{"process": g.name, "count": g.count,
                                   "rss_anon": g.rss_anon, "rss_file": g.rss_file,
                                   "rss_shmem": g.rss_shmem} for g in procs],
                    "tmpfs": [{"mount": t.mount, "used": t.used, "size": t.size}
                              for t in ws.tmpfs],
                }
                if ws.workload in kv:
                    entry["vllm"] = kv[ws.workload]
                scrapes = self._track(ws.ref.path).scrapes
                while scrapes and scrapes[0][0] < now - self.window:
                    scrapes.popleft()
                scrapes.append((now, json.dumps(entry, separators=(",", ":"))))
            cutoff = now - self.window
            for path in [p for p, t in self._tracks.items() if p not in live and (
                    not t.usage or t.usage[-1][0] < cutoff)]:
                del self._tracks[path]  # gone for a whole window: forget it

    def history(self, path: str) -> dict[str, Any]:
        cutoff = self._clock() - self.window
        with self._lock:
            t = self._tracks.get(path)
            if t is None:
                return {"usage": [], "scrapes": []}
            return {
                "usage": [[ts, v] for ts, v in t.usage if ts >= cutoff],
                "scrapes": [json.loads(s) for ts, s in t.scrapes if ts >= cutoff],
            }

    def __len__(self) -> int:
        return len(self._tracks)


# --- kills --------------------------------------------------------------------------------


def read_oom_kills(hierarchy: MemoryHierarchy, rel: str,
                   read: Callable[[str], str]) -> int | None:
    """Kills of processes in this cgroup and, on v2, beneath it (None when the kernel has
    no such counter). Not v2's ``memory.events.local``: it counts only processes directly
    in the cgroup, and a pod-level cgroup holds none (seen on a real v2 kernel)."""
    names = ("memory.events",) if hierarchy.version == 2 else ("memory.oom_control",)
    for name in names:
        try:
            text = read(hierarchy.file(rel, name))
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return None


@dataclass(frozen=True)
class OomKill:
    time: float
    cgroup: str
    workload: Workload
    pod_workload: Workload  # the pod-level labels the counter is reported on
    process: str
    pid: int | None
    victim_source: str  # "kmsg", "guess" or "unknown"


@dataclass
class PostMortem:
    """Counts kills, names victims, writes and serves the flight-recorder documents."""

    recorder: FlightRecorder
    directory: Path | None = None
    procfs: Path = Path("/proc")
    max_documents: int = 50
    kmsg: KmsgReader | None = None
    counts: dict[tuple[Workload, str], int] = field(default_factory=dict)
    documents: deque[tuple[str, dict[str, Any]]] = field(
        default_factory=lambda: deque(maxlen=50))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last: dict[str, int] = field(default_factory=dict)  # cgroup -> last oom_kill count
    _baselined: bool = False
    _pending: list[tuple[str, float]] = field(default_factory=list)  # kills to name
    # kills published in the last 30 s: time, cgroup, victim source, pid
    _recent: list[tuple[float, str, str, int | None]] = field(default_factory=list)
    _labels: dict[str, tuple[Workload, Workload]] = field(default_factory=dict)
    _processes: dict[str, list[tuple[int, str, int]]] = field(default_factory=dict)
    _previous: dict[str, list[tuple[int, str, int]]] = field(default_factory=dict)
    _victims: deque[tuple[float, KernelVictim]] = field(
        default_factory=lambda: deque(maxlen=256))

    # Fed by the pipeline after every scrape (event loop thread).
    def observe_scrape(self, snapshot: Snapshot,
                       processes: Mapping[str, Iterable[tuple[int, str, int]]]) -> None:
        pods = {ws.ref.pod_uid: ws.workload for ws in snapshot.workloads
                if ws.ref.is_pod_level}
        with self._lock:
            for ws in snapshot.workloads:
                pod = pods.get(ws.ref.pod_uid, ws.workload) if ws.ref.pod_uid else ws.workload
                self._labels[ws.ref.path] = (ws.workload, pod)
            for path, procs in processes.items():
                # Keep the previous scrape's processes too: the victim of a kill being
                # named right now is already missing from the newest table.
                self._previous[path] = self._processes.get(path, [])
                self._processes[path] = list(procs)
        self.recorder.record_scrape(snapshot)

    # Called by the sampler thread with the kill counters it read.
    def check(self, counters: Mapping[str, int]) -> list[OomKill]:
        """``counters``: kill-domain cgroup -> its oom_kill count. A kill domain is a
        pod-level cgroup on v2 (hierarchical: it outlives the container the kernel
        killed in) and a container cgroup on v1. Kernel-log victims are matched to the
        domain they belong to; one whose cgroup vanished before its counter was read
        is still counted from the log after a short grace period."""
        now = time.time()
        if self.kmsg is not None:
            for v in self.kmsg.read_victims():
                self._victims.append((now, v))
        kills: list[OomKill] = []
        with self._lock:
            for path, count in counters.items():
                before = self._last.get(path)
                if before is None:
                    # Kills from before the exporter started are history; a cgroup that
                    # appears later started from 0 (a kill right after its creation, before
                    # our first read, still counts).
                    before = count if not self._baselined else 0
                self._last[path] = count
                if count <= before:
                    continue
                self._pending.extend((path, now) for _ in range(count - before))
            still: list[tuple[str, float]] = []
            for path, seen in self._pending:
                kill = self._kill(path, now, give_up=now - seen >= GUESS_WAIT)
                if kill is None:
                    still.append((path, seen))
                else:
                    kills.append(kill)
            self._pending = still
            for seen, v in list(self._victims):
                if now - seen < 2.0 or not v.memcg:
                    continue
                self._victims.remove((seen, v))
                domain = self._domain_of(v.memcg)
                if domain is None:
                    continue
                if any(pid == v.pid or ((d == domain or d.startswith(domain + "/"))
                                          and src != "kmsg")
                       for _, d, src, pid in self._recent):
                    # The counter saw this kill first and it was named by a guess: the
                    # log line is the same kill, not another.
                    self._recent = [r for r in self._recent
                                    if not (r[1] == domain or r[1].startswith(domain + "/"))]
                    continue
                kills.append(self._from_victim(domain, v, now))  # cgroup gone before read
            for k in kills:
                key = (k.pod_workload, k.process)
                self.counts[key] = self.counts.get(key, 0) + 1
                self._recent.append((k.time, k.cgroup, k.victim_source, k.pid))
            self._recent = [r for r in self._recent if now - r[0] < 30]
            self._baselined = True
        for k in kills:
            self._publish(k)
        return kills

    def _domain_of(self, memcg: str) -> str | None:
        best = None
        for path in self._labels:
            if (memcg == path or memcg.startswith(path + "/")) and (
                    best is None or len(path) > len(best)):
                best = path
        return best

    def _names(self, domain: str) -> dict[int, tuple[str, int, str]]:
        """pid -> (name, rss, cgroup) of the last scrape's processes in the domain."""
        out = {}
        for table in (self._previous, self._processes):  # newest wins
            for path, procs in table.items():
                if path == domain or path.startswith(domain + "/"):
                    for pid, name, rss in procs:
                        out[pid] = (name, rss, path)
        return out

    def _from_victim(self, domain: str, v: KernelVictim, now: float) -> OomKill:
        names = self._names(domain)
        cgroup = names[v.pid][2] if v.pid in names else (v.memcg or domain)
        workload, pod = self._labels.get(cgroup, self._labels.get(domain, (
            Workload("", "/" + domain, ""),) * 2))
        name = names[v.pid][0] if v.pid in names else v.comm
        return OomKill(now, cgroup, workload, pod, name, v.pid, "kmsg")

    def _kill(self, domain: str, now: float, give_up: bool = True) -> OomKill | None:
        """The kill in ``domain``: from the kernel log, else the largest process that is
        gone; None while the victim may still be exiting (the counter moves first)."""
        for seen, v in reversed(self._victims):
            if now - seen < 30 and (v.memcg == domain or v.memcg.startswith(domain + "/")
                                    or (not v.memcg and v.pid in self._names(domain))):
                # The kernel logs one kill on two lines (oom-kill: and Killed process):
                # consume both.
                for entry in [e for e in self._victims if e[1].pid == v.pid]:
                    self._victims.remove(entry)
                return self._from_victim(domain, v, now)
        if not give_up and self.kmsg is not None and self.kmsg.available:
            return None  # the kernel log names the victim within moments: wait for it
        names = self._names(domain)
        gone = [(rss, pid, name, path) for pid, (name, rss, path) in names.items()
                if not self._alive(pid)]
        if not gone and not give_up:
            return None
        if gone:
            _, pid, name, path = max(gone)
            workload, pod = self._labels.get(path, self._labels.get(domain, (
                Workload("", "/" + domain, ""),) * 2))
            return OomKill(now, path, workload, pod, name, pid, "guess")
        workload, pod = self._labels.get(domain, (Workload("", "/" + domain, ""),) * 2)
        return OomKill(now, domain, workload, pod, UNKNOWN, None, "unknown")

    def _alive(self, pid: int) -> bool:
        """A zombie (killed, not yet reaped by its parent) counts as gone."""
        try:
            stat = (self.procfs / str(pid) / "stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[-1].split()[:1] not in (["Z"], ["X"])

    def _publish(self, k: OomKill) -> None:
        doc = {
            "kind": "headroom.oom_kill/v1",
            "time": k.time,
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(k.time)),
            "namespace": k.workload.namespace, "pod": k.workload.pod,
            "container": k.workload.container, "cgroup": "/" + k.cgroup,
            "victim": {"process": k.process, "pid": k.pid, "source": k.victim_source},
            "window_seconds": self.recorder.window,
            **self.recorder.history(k.cgroup),
        }
        pod_path = next((p for p, (w, _) in self._labels.items()
                         if w == k.pod_workload and p != k.cgroup), None)
        if pod_path is not None:
            doc["pod_level"] = {"cgroup": "/" + pod_path, **self.recorder.history(pod_path)}
        name = (f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(k.time))}-"
                f"{_safe(k.workload.namespace or 'host')}-{_safe(k.workload.pod)}-"
                f"{_safe(k.workload.container or 'pod')}-{int(k.time * 1000) % 1000:03d}.json")
        with self._lock:
            self.documents.append((name, doc))
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
        log.warning(
            "OOM kill in %s/%s/%s: %s (pid %s, from %s); flight recorder: %s",
            k.workload.namespace, k.workload.pod, k.workload.container, k.process, k.pid,
            k.victim_source, path or f"/debug/oom/{name}",
            extra={"fields": {"event": "oom_kill", "namespace": k.workload.namespace,
                              "pod": k.workload.pod, "container": k.workload.container,
                              "process": k.process, "pid": k.pid,
                              "document": str(path) if path else f"/debug/oom/{name}"}},
        )

    def _prune(self) -> None:
        assert self.directory is not None
        files = sorted(self.directory.glob("*.json"))
        for old in files[: max(0, len(files) - self.max_documents)]:
            old.unlink(missing_ok=True)

    def list_documents(self) -> list[str]:
        with self._lock:
            names = [n for n, _ in self.documents]
        if self.directory is not None and self.directory.is_dir():
            names = sorted(set(names) | {p.name for p in self.directory.glob("*.json")})
        return names

    def get_document(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            for n, doc in self.documents:
                if n == name:
                    return doc
        if self.directory is not None and _safe(name) == name and name.endswith(".json"):
            path = self.directory / name
            if path.is_file():
                loaded: dict[str, Any] = json.loads(path.read_text())
                return loaded
        return None

    def forget(self, live: Iterable[str]) -> None:
        keep = set(live)
        with self._lock:
            for d in (self._last, self._labels, self._processes, self._previous):
                for path in [p for p in d if p not in keep]:
                    del d[path]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:80] or "_"
