"""The real-kernel tier on cgroup v2: the same tests, on Debian's kernel under QEMU.

This CI machine's memory controller is cgroup v1; production Kubernetes nodes mostly run
v2. ``scripts/v2-guest.py`` boots the distribution kernel with a pure v2 hierarchy and
the host's ``/`` read-only (tmpfs overlay, scratch ext4 at /var/tmp), and runs the kernel
tier there in one boot. A guest that fails or hangs fails this test with the guest's
output (the script kills it at its time-out).

Needs root, ``qemu-system-x86`` and ``apt-get download`` on the first run (the kernel and
busybox are cached under ``.cache/v2-guest/``). Without qemu the test skips, unless
``HEADROOM_REQUIRE_V2_GUEST=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.v2guest

REPO = Path(__file__).resolve().parents[2]
# The real-kernel tests that run alone (the Prometheus and vLLM ones have tiers of their
# own and would take many minutes under TCG).
SELECT = "kernel and not prometheus and not vllm and not host_only"
GUEST_TIMEOUT = 1200  # seconds; about 4-5 minutes seen on 2 loaded cores (11 tests)


def collect_kernel_tier() -> tuple[list[str], int]:
    """Files and test count of the tier, collected on the host: the guest must pass all."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", SELECT, "tests"],
        cwd=REPO, capture_output=True, text=True, check=False,
    ).stdout
    ids = [line for line in out.splitlines() if "::" in line]
    files = sorted({i.split("::", 1)[0] for i in ids})
    return files, len(ids)


def test_the_kernel_tier_passes_on_a_real_cgroup_v2_kernel() -> None:
    if os.environ.get("HEADROOM_GUEST"):
        pytest.skip("already inside the guest")
    if shutil.which("qemu-system-x86_64") is None:
        msg = "qemu-system-x86_64 not installed (apt-get install qemu-system-x86)"
        if os.environ.get("HEADROOM_REQUIRE_V2_GUEST") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    if os.geteuid() != 0:
        pytest.skip("needs root (the tier creates memory cgroups)")
    files, count = collect_kernel_tier()
    assert count > 0, "no real-kernel tests collected"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts/v2-guest.py"), "run", "--no-stream",
         "--timeout", str(GUEST_TIMEOUT), "--",
         sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs",
         "-m", SELECT, *files],
        cwd=REPO, capture_output=True, text=True, timeout=GUEST_TIMEOUT + 300,
        env={**os.environ, "PYTHONPATH": str(REPO)}, check=False,
    )
    wall = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    print(f"\n{out}\nv2 tier: {count} tests, {wall:.1f} s wall (boot included)")
    assert proc.returncode == 0, f"the kernel tier failed on cgroup v2:\n{out}"
    summary = re.findall(r"^=*\s*(\d+ passed.*?)\s*=*$", proc.stdout, re.M)
    assert summary, f"no pytest summary from the guest:\n{out}"
    # Every test ran on v2: a skip there means a v2 path is missing, not a host limit.
    assert summary[-1].startswith(f"{count} passed") and "skipped" not in summary[-1], (
        f"expected all {count} tests to pass in the guest, got {summary[-1]!r}:\n{out}")
