"""exporter/host/degraded.py: data lost to a missing capability is logged once and exported.

The end-to-end proof is the container check (`bash scripts/image.sh check`, run by
scripts/test.sh with SYS_PTRACE removed from the chart's pod); here the parts on literal
input, and a real exporter without capabilities on the real kernel.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter.exposition.encode import encode_families
from exporter.exposition.join import Snapshot
from exporter.exposition.render import health_families
from exporter.host.degraded import (
    CAP_SYS_PTRACE,
    CAP_SYSLOG,
    DEVICE_DENIED,
    PERMISSION_DENIED,
    Degradations,
    effective_caps,
    reason_for,
)
from tests.helpers.kernel import KernelUnavailable, own_memory_cgroup
from tests.helpers.net import free_port, stop_all, wait_http

STATUS = "Name:\tpython3\nCapInh:\t0000000000000000\nCapEff:\t0000000000080000\n"


@pytest.mark.unit
def test_effective_caps_and_the_reason_they_give() -> None:
    eff = effective_caps(STATUS)
    assert eff == 1 << CAP_SYS_PTRACE
    assert reason_for(CAP_SYS_PTRACE, eff) == PERMISSION_DENIED  # held: something else
    assert reason_for(CAP_SYSLOG, eff) == "missing_cap_syslog"
    assert reason_for(CAP_SYS_PTRACE, 0) == "missing_cap_sys_ptrace"
    assert reason_for(CAP_SYSLOG, 1 << CAP_SYSLOG, DEVICE_DENIED) == DEVICE_DENIED
    assert effective_caps("Name:\tx\n") == 0


@pytest.mark.unit
def test_each_degradation_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    d = Degradations()
    d._caps = 0  # as in a container without capabilities
    with caplog.at_level(logging.WARNING, logger="exporter.host.degraded"):
        for pid in (10, 11, 12):
            d.report("procfs", CAP_SYS_PTRACE, f"smaps_rollup of pid {pid}: Permission denied")
        d.report("tmpfs", CAP_SYS_PTRACE, "/host/proc/10/root: Permission denied")
    assert d.current() == (("procfs", "missing_cap_sys_ptrace"),
                           ("tmpfs", "missing_cap_sys_ptrace"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "pid 10" in lines[0] and "degraded" in lines[0]


@pytest.mark.unit
def test_rendered_next_to_collector_success() -> None:
    snap = Snapshot(workloads=(), collectors=(),
                    degraded=(("procfs", "missing_cap_sys_ptrace"),))
    text = encode_families(health_families(snap)).decode()
    assert ('headroom_collector_degraded{collector="procfs",reason="missing_cap_sys_ptrace"} 1'
            in text)
    assert f"# HELP {c.COLLECTOR_DEGRADED.name} " in text
    # Nothing degraded: no family at all (the goldens stay as they were).
    quiet = encode_families(health_families(Snapshot(workloads=(), collectors=()))).decode()
    assert c.COLLECTOR_DEGRADED.name not in quiet


@pytest.mark.kernel
def test_an_exporter_without_sys_ptrace_says_so(tmp_path: Path) -> None:
    """The real kernel: an exporter holding no capability cannot read smaps_rollup of a
    process that holds them all (this test's child, root with full capabilities)."""
    try:
        h, own = own_memory_cgroup()
    except KernelUnavailable as exc:
        pytest.skip(str(exc))
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    rel = f"{own.rstrip('/')}/headroom-degraded-{os.getpid()}"
    h.dir(rel).mkdir()
    h.dir(f"{rel}/kubepods").mkdir()  # an empty kubepods tree: the host's stays out
    procs = h.dir(rel) / "cgroup.procs"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              preexec_fn=lambda: procs.write_text(str(os.getpid())))
    port = free_port()
    exporter = subprocess.Popen(
        ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--",
         sys.executable, "-m", "exporter.cli", "serve", f"--web.listen-address=127.0.0.1:{port}",
         f"--cgroup.track={rel.strip('/')}", "--no-collector.vllm", "--no-collector.nvml",
         "--no-collector.kubernetes", f"--cgroup.kubepods-path={rel.strip('/')}/kubepods"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", exporter, timeout=60)
        want = 'headroom_collector_degraded{collector="procfs",reason="missing_cap_sys_ptrace"} 1'
        text = ""
        for _ in range(60):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
            if want in text:
                break
            time.sleep(0.5)
        assert want in text
        assert "headroom_process_memory_bytes{" in text  # /proc/PID/status still reads
        assert "headroom_process_memory_pss_bytes{" not in text
    finally:
        stop_all([exporter, holder])
        h.dir(f"{rel}/kubepods").rmdir()
        h.dir(rel).rmdir()
