"""The real stack of the e2e and on-call tiers: ``headroom serve`` on a kube tree of real
cgroups and a real Prometheus scraping it (and what they need to run at all)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from tests.helpers.kernel import KubeTree, need_kernel


def need_kernel_and(*binaries: str) -> None:
    """Skip the test unless the kernel tier can run here (a writable memory cgroup) and
    every one of ``binaries`` is installed."""
    need_kernel()
    need_binaries(*binaries)


def need_binaries(*binaries: str) -> None:
    """Skip the test unless every one of ``binaries`` is installed."""
    for binary in binaries:
        if shutil.which(binary) is None:
            pytest.skip(f"{binary} not installed (scripts/test.sh installs it)")


def serve_on_tree(tree: KubeTree, port: int, recorder_dir: Path, *extra: str) -> list[str]:
    """``headroom serve`` on 127.0.0.1:``port`` reading ``tree`` alone (no Kubernetes API,
    NVML, vLLM or anything of the host's /proc), a 1 s peak window, its flight recorder in
    ``recorder_dir``; then ``extra``."""
    return [sys.executable, "-m", "exporter.cli", "serve",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--cgroup.kubepods-path={tree.kubepods}", "--no-collector.kubernetes",
            "--cgroup.host-vllm=false",  # nothing from the host's /proc
            "--no-collector.nvml", "--no-collector.vllm", "--sampler.window=1s",
            f"--flight-recorder.dir={recorder_dir}", *extra]


def prometheus_yml(target: str, *, interval_s: int = 1, rules: Path | None = None,
                   alertmanager: str | None = None) -> str:
    """A Prometheus configuration scraping one exporter (``target``: host:port) and
    evaluating every ``interval_s``; with ``rules`` and an ``alertmanager`` (host:port)
    when given."""
    text = f"global:\n  scrape_interval: {interval_s}s\n  evaluation_interval: {interval_s}s\n"
    if rules is not None:
        text += f"rule_files: [{rules}]\n"
    if alertmanager is not None:
        text += ("alerting:\n  alertmanagers:\n  - static_configs:\n"
                 f"    - targets: ['{alertmanager}']\n")
    return (text + "scrape_configs:\n- job_name: headroom\n  static_configs:\n"
            f"  - targets: ['{target}']\n")


def start_prometheus(work: Path, port: int, config: str,
                     stderr: IO[bytes] | int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """A real Prometheus on 127.0.0.1:``port`` with ``config`` (written to
    ``work/prometheus.yml``) and its TSDB in ``work/tsdb``."""
    (work / "prometheus.yml").write_text(config)
    return subprocess.Popen(
        ["prometheus", f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=stderr)
