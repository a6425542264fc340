"""How long ``headroom serve`` takes from exec to its first /healthz answer (a benchmark,
not a test: tests/unit/test_cli.py only waits for it, with a generous deadline).

    python3 -m benchmarks.serve_ready [--runs 10]

Starts the real command on the v1 fixture host tree (no kernel, no API, no GPU, no
vLLM: what every install pays before it serves), polls /healthz every 10 ms, and prints
each run and the median, min and max in seconds (interpreter start-up and imports
included). On a shared machine the median is the figure to compare.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request

from tests.conftest import HOSTS
from tests.helpers.net import free_port, stop_all

FIXTURE = HOSTS / "v1-cgroupfs-containerd"


def time_to_ready(deadline: float = 120.0) -> float:
    port = free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter.cli", "serve", f"--web.listen-address=127.0.0.1:{port}",
         f"--path.procfs={FIXTURE / 'proc'}", f"--path.cgroupfs={FIXTURE / 'sys/fs/cgroup'}",
         "--no-collector.kubernetes", "--no-collector.nvml", "--no-collector.vllm"],
        stderr=subprocess.DEVNULL,
    )
    try:
        while time.monotonic() - start < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"headroom serve exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=1):
                    return time.monotonic() - start
            except OSError:
                time.sleep(0.01)
        raise SystemExit(f"no /healthz answer within {deadline:.0f} s")
    finally:
        stop_all([proc])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        runs.append(time_to_ready())
        print(f"run {i + 1}: {runs[-1]:.2f} s")
    print(f"serve -> first /healthz: median {statistics.median(runs):.2f} s, "
          f"min {min(runs):.2f} s, max {max(runs):.2f} s over {len(runs)} runs")


if __name__ == "__main__":
    main()
