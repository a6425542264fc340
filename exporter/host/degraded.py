"""Data lost to a missing capability or a denied device, made visible.

Without CAP_SYS_PTRACE the kernel refuses /proc/PID/smaps_rollup and /proc/PID/root of
processes holding more capabilities than the exporter: PSS, the pod's tmpfs mounts and its
orphaned files are then missing, and before this module the exposition just got thinner.
Now the collector that lost data says so once in the log (per collector and reason) and
``headroom_collector_degraded{collector,reason} 1`` is exported from then on: a capability
does not come back while the process lives.

Reasons name the cause when the exporter can tell it from its own effective capabilities
(``missing_cap_sys_ptrace``, ``missing_cap_syslog``); otherwise ``permission_denied`` (an
LSM, a device cgroup: the capability is there) or ``device_denied`` (a device the
container's device cgroup refuses). The set is fixed, so the series stay bounded whatever
a pod does.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

log = logging.getLogger(__name__)

CAP_SYS_PTRACE = 19
CAP_SYSLOG = 34
_CAP_NAMES = {CAP_SYS_PTRACE: "sys_ptrace", CAP_SYSLOG: "syslog"}
PERMISSION_DENIED = "permission_denied"
DEVICE_DENIED = "device_denied"


def effective_caps(status_text: str) -> int:
    """CapEff of a /proc/PID/status text (0 when absent)."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def reason_for(capability: int, cap_eff: int, otherwise: str = PERMISSION_DENIED) -> str:
    """``missing_cap_<name>`` when ``capability`` is not in ``cap_eff``, else ``otherwise``."""
    if not cap_eff >> capability & 1:
        return f"missing_cap_{_CAP_NAMES[capability]}"
    return otherwise


def _own_caps() -> int:
    # The exporter's own process (not the host's procfs that --path.procfs names).
    try:
        return effective_caps(Path("/proc/self/status").read_text())
    except OSError:
        return 0


class Degradations:
    """Thread-safe set of (collector, reason), each logged once when first reported."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], str] = {}
        self._caps: int | None = None

    def report(self, collector: str, capability: int, detail: str,
               otherwise: str = PERMISSION_DENIED) -> None:
        """``collector`` lost data (``detail``, e.g. the path and errno) to ``capability``
        missing, or to ``otherwise`` when it is there."""
        with self._lock:
            if self._caps is None:
                self._caps = _own_caps()
            key = (collector, reason_for(capability, self._caps, otherwise))
            if key in self._seen:
                return
            self._seen[key] = detail
        log.warning("collector %s degraded (%s): %s; the data it needs is missing from "
                    "the exposition", key[0], key[1], detail)

    def current(self) -> tuple[tuple[str, str], ...]:
        with self._lock:
            return tuple(sorted(self._seen))


# One per process: capabilities are the process's, and every collector shares them.
DEGRADED = Degradations()
