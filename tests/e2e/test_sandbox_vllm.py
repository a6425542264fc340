"""The vLLM-path attackers together (docs/threats.md: kv-groups, kv-bomb, silent-ports,
big-bodies, own-network-namespace), black box: a real ``headroom serve`` in a sandbox (new
PID and network namespaces, loopback only, the exporter in a 160 MiB memory cgroup beneath
the test's own), scraped for a minute while they attack (benchmarks/hostile_vllm_soak.py,
whose default run is the 10-minute soak).

Checked: every scrape has the healthy pod's vLLM series; /healthz always answers (here
within 5 s: the 1 s figure is the benchmark's, on a machine this test does not own); the
exporter is neither killed nor over its limit; no connection ever reaches the address
the netns pod added in a namespace of its own; the kv-groups and kv-bomb publishers are
counted as overflow and garbage, not followed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.kernel import KernelUnavailable, own_memory_cgroup

REPO = Path(__file__).resolve().parents[2]
SOAK = REPO / "benchmarks" / "hostile_vllm_soak.py"

pytestmark = pytest.mark.sandbox


def sandbox_available() -> str:
    """Why the sandbox cannot run here ('' when it can)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare and ip (util-linux, iproute2)"
    try:
        own_memory_cgroup()
    except KernelUnavailable as exc:
        return str(exc)
    return ""


def test_hostile_vllm_pods_for_a_minute(tmp_path: Path) -> None:
    why = sandbox_available()
    if why:
        if os.environ.get("HEADROOM_REQUIRE_SANDBOX"):
            pytest.fail(f"sandbox tier required but unavailable: {why}")
        pytest.skip(why)
    out = tmp_path / "report.json"
    run = subprocess.run([sys.executable, str(SOAK), "--seconds", "60", "--json", str(out),
                          "--healthz-limit", "5"], cwd=REPO, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.exists(), run.stdout + run.stderr
    report = json.loads(out.read_text())
    assert report["scrapes"] >= 10, report
    assert report["scrapes_with_good_pod"] == report["scrapes"], report
    assert report["healthz_late_or_failed"] == 0, report
    assert report["exporter_alive"] and report["exporter_oom_kills"] == 0, report
    assert 0 < report["exporter_peak_bytes"] < 160 << 20, report
    assert report["decoy_connections"] == 0, report
    lost = report["kv_lost"]
    assert any(k.endswith("kvgroups:overflow") and v > 0 for k, v in lost.items()), report
    assert any(k.endswith("kvbomb:garbage") and v > 0 for k, v in lost.items()), report
    assert run.returncode == 0, report
