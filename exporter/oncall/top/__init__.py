"""``headroom top``: a live terminal view of pods: how close, when, what grows.

Two sources, one answer. With ``--prometheus URL`` (cluster mode: every node's pods, like
``kubectl top``) each row is the forecast contract's recorded series. Without it, top
reads the local exporter's /metrics every second and computes the same definition itself
(:mod:`exporter.oncall.forecast`, the mirror of the rules) over its own reads; the header
says which source it used.

Each row is a pod on its *binding* cgroup (the tightest of the pod-level cgroup and its
containers; the CGROUP column says which), with unreclaimable / limit, the growth at the
horizon that binds, the time to limit, the top grower, /dev/shm used and orphaned, vLLM
KV usage, and the last OOM kill's age (its /debug/oom/ link under the table). Columns
are dropped by priority on a narrow terminal; names are cut in the middle (the end of a
pod name tells its replicas apart). Keys: ``t u g s n`` sort (time to limit, fullness,
growth, /dev/shm, name), ``/`` filters (Enter applies, Esc clears), arrows or ``j k``
move, Enter opens a pod (its cgroups and processes with growth and limit), Esc goes
back, ``q`` quits. Keyboard only, so it works over SSH.

The model is pure: :mod:`.local` (one read of the exporter), :mod:`.history` (the
local forecast over top's reads), :mod:`.cluster` (the recorded forecast), :mod:`.rows`,
:mod:`.state`, :mod:`.screen` (the lines to draw) and :mod:`.keys` (input). Only
:mod:`.wire` and :mod:`.reader` touch the network, and :mod:`.terminal` the terminal.
"""

from exporter.oncall.top.cells import cut_middle, width_of
from exporter.oncall.top.cluster import cluster_of, cluster_queries, cluster_rows
from exporter.oncall.top.history import Histories, local_forecasts
from exporter.oncall.top.keys import handle_key
from exporter.oncall.top.local import Cgroup, Pod, Proc, parse
from exporter.oncall.top.reader import Read, Reader, apply, local_reader
from exporter.oncall.top.rows import local_rows, sort_rows
from exporter.oncall.top.screen import COLUMNS, draw
from exporter.oncall.top.state import State
from exporter.oncall.top.terminal import add_arguments, main, run

__all__ = [
    "COLUMNS", "Cgroup", "Histories", "Pod", "Proc", "Read", "Reader", "State",
    "add_arguments", "apply", "cluster_of", "cluster_queries", "cluster_rows", "cut_middle",
    "draw", "handle_key", "local_forecasts", "local_reader", "local_rows", "main", "parse",
    "run", "sort_rows", "width_of",
]
