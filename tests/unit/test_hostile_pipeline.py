"""Hostile or broken hosts at the pipeline level: /proc gone, control characters in label
values (docs/threats.md: proc-gone, control-characters)."""

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


async def test_procfs_gone_fails_the_collectors(tmp_path: Path) -> None:
    """With /proc unmounted (or the hostPath gone) procfs and tmpfs reported success 1
    with no series: a blind exporter that looked healthy (docs/threats.md: proc-gone)."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "v1-cgroupfs-containerd", root, symlinks=True)
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


def test_info_label_values_with_esc_rtl_and_bad_bytes_are_made_safe() -> None:
    """Raw ESC and RTL-override characters reached label values (a dashboard or a
    terminal then shows another name); a lone surrogate (a non-UTF-8 cgroup name) made the
    whole body unencodable. The exposition stays parseable by client_python
    (docs/threats.md: control-characters)."""
    from prometheus_client.parser import text_string_to_metric_families

    from exporter.collectors.procfs import process_name
    from exporter.exposition.encode import label_pairs
    from exporter.host.labels import LABEL_MAX, bounded, bounded_unique

    hostile = "\x1b[2Jvllm\u202egnp.exe\udcff\n"
    name = process_name([hostile.strip() + "y" * 500], "comm")
    assert len(name) <= LABEL_MAX + 3 and name.endswith("...")
    assert not any(c in name for c in "\x1b\u202e\udcff\n")
    pairs = label_pairs(("process", "pod"), (hostile, bounded_unique("/" + "p" * 300)))
    body = f"# TYPE x gauge\nx{{{pairs}}} 1\n".encode()  # encodes: no surrogate left
    (fam,) = text_string_to_metric_families(body.decode())
    (sample,) = fam.samples
    assert "\x1b" not in sample.labels["process"] and "\u202e" not in sample.labels["process"]
    assert sample.labels["pod"].startswith("/ppp") and len(sample.labels["pod"]) <= LABEL_MAX
    assert bounded_unique("/" + "p" * 300) != bounded_unique("/" + "p" * 299 + "q")
    assert bounded("ok-name") == "ok-name"
