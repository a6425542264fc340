"""What grows in the binding cgroup: each kind, process, tmpfs mount and the memory no
process owns, from the trends or from the forecast's series."""

from __future__ import annotations

from collections.abc import Sequence

from exporter.catalog import KIND_ANON, KIND_SHMEM
from exporter.oncall.diagnosis.evidence import CgroupEvidence, Evidence, Trend, total
from exporter.oncall.diagnosis.verdict import (
    FILE_KINDS,
    MIN_GROWTH_BYTES_PER_DAY,
    MIN_GROWTH_LIMIT_RATIO,
    UNRECLAIMABLE_KINDS,
    Growth,
)
from exporter.oncall.forecast import grower_text, growing
from exporter.oncall.units import DAY, MiB, fmt_rate, printable
from exporter.promql import KIND_DEV_SHM, KIND_HIDDEN


def growth_threshold(limit: float) -> float:
    """Bytes/s below which a slope is noise for a cgroup of this limit."""
    return max(MIN_GROWTH_BYTES_PER_DAY, MIN_GROWTH_LIMIT_RATIO * limit) / DAY


def rate_of(t: Trend | None, sustained: bool) -> float | None:
    if t is None:
        return None
    return t.lasting() if sustained else (t.d1h if t.d1h is not None else t.lasting())


def in_scope(container: str, binding: str) -> bool:
    """The pod-level cgroup holds every container's charges."""
    return binding == "" or container == binding


def growth_of(ev: Evidence, cg: CgroupEvidence, sustained: bool, thr: float) -> list[Growth]:
    out: list[Growth] = []
    for kind in UNRECLAIMABLE_KINDS:
        t = cg.kinds.get(kind)
        r = rate_of(t, sustained)
        if t is not None and r is not None and r > thr:
            out.append(Growth("kind", kind, cg.container, t.now, r))
    files = [cg.kinds[k] for k in FILE_KINDS if k in cg.kinds]
    u_rate = rate_of(cg.unreclaimable, sustained) or 0.0
    if files:
        f = total(files)
        r = rate_of(f, sustained)
        if r is not None and r < -thr and u_rate > thr:
            out.append(Growth("page_cache", "page cache squeezed out", cg.container, f.now,
                              r, "the kernel reclaims it to make room: the working set "
                              "stays flat while unreclaimable memory grows"))
        elif r is not None and r > thr:
            out.append(Growth("page_cache", "page cache (reclaimable)", cg.container, f.now,
                              r, "the kernel takes it back before any OOM kill"))
    procs = [p for p in ev.processes if in_scope(p.container, cg.container)]
    for p in procs:
        r = rate_of(p.held, sustained)
        if r is not None and r > thr:
            parts = [f"{name} {fmt_rate(rate_of(t, sustained))}"
                     for name, t in ((KIND_ANON, p.anon), (KIND_SHMEM, p.shmem)) if t is not None]
            out.append(Growth("process", p.process, p.container, p.held.now, r,
                              ", ".join(parts)))
    if procs or cg.kinds:
        hidden = cg.unreclaimable - total(p.held for p in procs)
        r = rate_of(hidden, sustained)
        if r is not None and r > thr:
            out.append(Growth("no_owner", "memory no process owns", cg.container,
                              max(0.0, hidden.now), r,
                              "unmapped /dev/shm files, kernel memory, charges left by "
                              "dead processes"))
    for tf in ev.tmpfs:
        # tmpfs series are pod-level (the pod's /dev/shm, whichever container wrote it).
        r = rate_of(tf.used, sustained)
        if r is not None and r > thr:
            out.append(Growth("tmpfs", tf.mount, tf.container, tf.used.now, r))
        r = rate_of(tf.orphaned, sustained)
        if tf.orphaned is not None and r is not None and r > thr:
            out.append(Growth("orphaned", f"{tf.mount} files no process holds",
                              tf.container, tf.orphaned.now, r))
    return sorted(out, key=lambda g: (g.what == "page_cache", -g.rate))


KIND_NAMES = {KIND_DEV_SHM: "/dev/shm", KIND_HIDDEN: "memory no process owns"}


def forecast_growth(ev: Evidence, cg: CgroupEvidence, thr: float,
                     lasting: Sequence[Growth]) -> list[Growth]:
    """What grows in the binding cgroup, from the forecast's series: the top grower
    first (TOP_GROWER: the process and kind the page names, at its rate). When a kill is
    forecast (a page can be out), then each kind and process growing faster than noise
    (KIND_GROWTH, PROCESS_GROWTH: the page's last hour) and the pod's /dev/shm, flat or
    not (the page's "; /dev/shm flat"); otherwise ``lasting``, the growth that lasts (a
    daily swing's hour is no growth)."""
    f = next((f for f in ev.forecasts if f.container == cg.container), None)
    if f is None:
        return list(lasting)
    procs = {p.process: p.held.now for p in ev.processes
             if in_scope(p.container, cg.container)}
    where_of = {p.process: p.container for p in ev.processes
                if in_scope(p.container, cg.container)}
    kinds_now: dict[str, float | None] = {k: t.now for k, t in cg.kinds.items()}
    shm = [t for t in ev.tmpfs if t.mount == "/dev/shm"]
    kinds_now[KIND_DEV_SHM] = sum(t.used.now for t in shm) if shm else None
    kinds_now[KIND_HIDDEN] = (max(0.0, cg.unreclaimable.now - sum(procs.values()))
                           if procs else None)
    out: list[Growth] = []
    g = growing(f.grower)
    if g is not None:
        now = procs.get(g.process) if g.process else kinds_now.get(g.kind)
        out.append(Growth("grower", printable(grower_text(g), 60),
                          where_of.get(g.process, cg.container), now, g.rate,
                          "the top grower, as the page names it"))
    if f.time_to_limit is None:
        return out + list(lasting)
    for kind, r in sorted(f.kind_growth.items(), key=lambda kv: -kv[1]):
        if r > thr and kind != KIND_DEV_SHM:
            # Memory no process owns is not a kind of the cgroup's own (as in the trends).
            out.append(Growth("no_owner" if kind == KIND_HIDDEN else "kind",
                              KIND_NAMES.get(kind, kind), cg.container,
                              kinds_now.get(kind), r))
    for name, r in sorted(f.process_growth.items(), key=lambda kv: -kv[1]):
        if r > thr:
            out.append(Growth("process", printable(name, 60), where_of.get(name, ""),
                              procs.get(name), r))
    pod = next((p for p in ev.forecasts if p.container == ""), None)
    shm_rate = pod.kind_growth.get(KIND_DEV_SHM) if pod is not None else None
    if shm_rate is not None:
        out.append(Growth("tmpfs", "/dev/shm", "", kinds_now[KIND_DEV_SHM], shm_rate,
                          "flat" if shm_rate <= SHM_FLAT_BPS else ""))
    return out


SHM_FLAT_BPS = float(MiB) / DAY  # the page's "/dev/shm flat": under 1 MiB/day


def forecast_grower(ev: Evidence, container: str) -> str:
    f = next((f for f in ev.forecasts if f.container == container and growing(f.grower)),
             None)
    return printable(grower_text(f.grower), 60) if f is not None else ""
