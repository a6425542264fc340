"""Hostile or broken hosts at the pipeline level: /proc gone (F18)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import (
    HOSTS,
    exposition,
    fixture_pipeline,
    host_config,
    on_tree,
    parse_exposition,
)


async def test_f18_procfs_gone_fails_the_collectors(tmp_path: Path) -> None:
    """F18: with /proc unmounted (or the hostPath gone) procfs and tmpfs reported
    success 1 with no series: a blind exporter that looked healthy."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "v1-cgroupfs-containerd", root)
    pipeline = fixture_pipeline(on_tree(host_config("v1-cgroupfs-containerd"), root))
    try:
        before = parse_exposition(await exposition(pipeline))
        assert before['headroom_collector_success{collector="procfs"}'] == 1
        shutil.rmtree(root / "proc")
        (root / "proc").mkdir()  # an empty mount point, as after an unmount
        after = parse_exposition(await exposition(pipeline))
        assert after['headroom_collector_success{collector="procfs"}'] == 0
        assert after['headroom_collector_success{collector="tmpfs"}'] == 0
        # The cgroup figures do not need /proc: they stay.
        assert after['headroom_collector_success{collector="cgroup"}'] == 1
        assert any(k.startswith("headroom_memory_usage_bytes{") for k in after)
    finally:
        await pipeline.aclose()
