"""The table's rows: one per pod on its binding cgroup, its last kill, and the sort."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from exporter.oncall import forecast as fc
from exporter.oncall.top.cells import finite
from exporter.oncall.top.local import Cgroup, Key, Pod

KILL_SHOWN_S = 3600.0  # a killed pod whose cgroups are gone stays on screen this long
SORTS = {"t": "time to limit", "u": "used/limit", "g": "growth", "s": "/dev/shm",
         "n": "name"}


# --- kills: seen as the counter moves ---------------------------------------------------------
@dataclass(frozen=True)
class KillMark:
    count: float
    when: float | None  # None: before top started (cluster mode: from Prometheus)
    link: str


def track_kills(old: Mapping[Key, KillMark], pods: Mapping[Key, Pod], now: float,
                first: bool) -> dict[Key, KillMark]:
    """A pod's kill counter rising between reads is a kill at this read; a pod that is
    gone keeps its mark for ``KILL_SHOWN_S``."""
    out: dict[Key, KillMark] = {}
    for key, p in pods.items():
        link = f"{p.exporter.rstrip('/')}/debug/oom/" if p.exporter else "/debug/oom/"
        prev = old.get(key)
        if p.kills <= 0:
            continue
        if prev is None:
            out[key] = KillMark(p.kills, None if first else now, link)
        elif p.kills > prev.count:
            out[key] = KillMark(p.kills, now, link)
        else:
            out[key] = prev
    for key, m in old.items():
        if key not in pods and m.when is not None and now - m.when < KILL_SHOWN_S:
            out[key] = m
    return out


# --- rows -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    namespace: str
    pod: str
    cgroup: str  # the binding cgroup: a container's name, or "(pod)"
    limit: float | None
    unreclaimable: float | None
    rate: float | None
    ttl: float | None
    horizon: str | None
    grower: str
    shm: float | None = None
    orphaned: float | None = None
    kv: float | None = None
    kill: KillMark | None = None
    gone: bool = False
    noise: bool = False  # the peaks within the page's noise band of the limit

    @property
    def key(self) -> Key:
        return self.namespace, self.pod

    @property
    def ratio(self) -> float | None:
        lim, u = finite(self.limit), finite(self.unreclaimable)
        if not lim or u is None:
            return None
        return u / lim

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.pod}" if self.namespace else self.pod


def row_of(f: fc.Forecast, shm: float | None = None, orphaned: float | None = None,
           kv: float | None = None, kill: KillMark | None = None) -> Row:
    return Row(f.namespace, f.pod, f.container or "(pod)", f.limit, f.unreclaimable,
               finite(f.rate), finite(f.time_to_limit), f.horizon,
               fc.grower_text(fc.growing(f.grower)), shm, orphaned, kv, kill,
               noise=f.in_noise_band)


def local_rows(pods: Mapping[Key, Pod], forecasts: Mapping[Key, Sequence[fc.Forecast]],
               kills: Mapping[Key, KillMark]) -> list[Row]:
    out = []
    for key, p in pods.items():
        b = fc.tightest(forecasts.get(key, ()))
        if b is None:
            g = next(iter(p.cgroups), Cgroup(""))
            out.append(Row(p.namespace, p.pod, g.container or "(pod)", g.limit,
                           g.unreclaimable, None, None, None, "-", p.shm, p.orphaned,
                           p.kv_usage, kills.get(key)))
            continue
        out.append(row_of(b, p.shm, p.orphaned, p.kv_usage, kills.get(key)))
    for key, m in kills.items():
        if key not in pods:
            out.append(Row(key[0], key[1], "-", None, None, None, None, None, "-",
                           kill=m, gone=True))
    return out


def _num_key(x: float | None, negate: bool = False) -> tuple[int, float]:
    """Sort numbers, with unknown/NaN/Inf last whichever way the column sorts."""
    v = finite(x)
    if v is None:
        return (1, 0.0)
    return (0, -v if negate else v)


def sort_rows(rs: Iterable[Row], sort: str = "t", filt: str = "") -> list[Row]:
    out = [r for r in rs if not filt or filt in r.namespace or filt in r.pod]
    keys: dict[str, Callable[[Row], tuple[object, ...]]] = {
        # The noise band pages whatever the trend's time says: those first.
        "t": lambda r: (not r.noise, _num_key(r.ttl), _num_key(r.ratio, True)),
        "u": lambda r: (_num_key(r.ratio, True),),
        "g": lambda r: (_num_key(r.rate, True),),
        "s": lambda r: (_num_key(r.shm, True),),
        "n": lambda r: (r.namespace, r.pod),
    }
    return sorted(out, key=lambda r: (*keys[sort](r), r.namespace, r.pod))

