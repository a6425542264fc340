"""The two sources read in a thread, and a read applied to the state."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.oncall import forecast as fc
from exporter.oncall.top.cluster import Cluster, cluster_rows, fetch_cluster
from exporter.oncall.top.history import local_forecasts
from exporter.oncall.top.local import Key, Pod, parse
from exporter.oncall.top.rows import local_rows, track_kills
from exporter.oncall.top.state import State
from exporter.oncall.top.wire import fetch


@dataclass(frozen=True)
class Read:
    when: float
    error: str = ""
    pods: dict[Key, Pod] | None = None  # local: one exposition
    cluster: Cluster | None = None  # --prometheus: the recorded series


class Reader:
    """Reads its source every ``interval`` in a thread: a slow or hung exporter or
    Prometheus never freezes the keys. Only the newest read is kept."""

    def __init__(self, read: Callable[[], Read], interval: float) -> None:
        self._read, self._interval = read, interval
        self._latest: queue.Queue[Read] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="headroom-top-reader",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                read = self._read()
            except Exception as exc:  # a restart of the source must not end the view
                read = Read(time.time(), f"{type(exc).__name__}: {exc}"[:200])
            with contextlib.suppress(queue.Empty):
                self._latest.get_nowait()  # drop an unread older one
            self._latest.put(read)
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - started)))

    def latest(self) -> Read | None:
        try:
            return self._latest.get_nowait()
        except queue.Empty:
            return None

    def stop(self) -> None:
        self._stop.set()


def local_reader(url: str, base: str) -> Callable[[], Read]:
    def read() -> Read:
        now = time.time()
        return Read(now, pods=parse(fetch(url), base))
    return read


def cluster_reader(base: str, extra: str) -> Callable[[], Read]:
    def read() -> Read:
        return Read(time.time(), cluster=fetch_cluster(base, extra))
    return read


def apply(st: State, read: Read) -> None:
    st.error = read.error
    if read.cluster is not None:
        st.source = fc.RECORDED
        st.updated = read.when
        st.rows, st.cgroups = cluster_rows(read.cluster)
        st.kills = dict(read.cluster.kills)
        st.procs = dict(read.cluster.processes)
        st.proc_growth = dict(read.cluster.process_growth)
        return
    if read.pods is None:
        return
    first = st.reads == 0
    st.reads += 1
    st.updated = read.when
    st.procs = {k: p.processes for k, p in read.pods.items()}
    st.hist.observe(read.when, read.pods)
    # As the rules do: a forecast per evaluation step, not per read (each costs a pass
    # over every series); a pod that came or went is forecast at once.
    if (st.forecast_at is None or read.when - st.forecast_at >= st.hist.windows.step
            or set(read.pods) != set(st.cgroups)):
        st.cgroups = local_forecasts(read.pods, st.hist, read.when)
        st.forecast_at = read.when
    st.kills = track_kills(st.kills, read.pods, read.when, first)
    st.rows = local_rows(read.pods, st.cgroups, st.kills)

