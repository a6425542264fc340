"""Bad input never fails the scrape: the collector is marked failed, the rest is served,
and one line is logged per distinct error."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.assembly import factory
from exporter.assembly.config import ScrapeSettings
from exporter.host.paths import CgroupLayoutError, HostPaths
from tests.conftest import (
    HOSTS,
    exposition,
    fixture_pipeline,
    host_config,
    kubepods,
    on_tree,
    parse_exposition,
)

V2 = "v2-systemd-mixed"


def copy_host(tmp_path: Path, host: str = V2) -> Path:
    root = tmp_path / host
    shutil.copytree(HOSTS / host, root, symlinks=True)
    return root


def success(text: str, collector: str) -> float:
    return parse_exposition(text)[f'headroom_collector_success{{collector="{collector}"}}']


def test_unreadable_cgroup_file_fails_the_collector_not_the_scrape(
        tmp_path: Path) -> None:
    """A real permission error: the scrape runs without CAP_DAC_OVERRIDE (as a hardened
    DaemonSet would) and one cgroup's memory.stat is mode 000."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop CAP_DAC_OVERRIDE")
    root = copy_host(tmp_path)
    redis = next(root.glob("sys/fs/cgroup/kubepods.slice/kubepods-pod*.slice/crio-1*.scope"))
    (redis / "memory.stat").chmod(0)
    script = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from tests.conftest import exposition, fixture_pipeline, host_config, on_tree
        from pathlib import Path
        cfg = on_tree(host_config({V2!r}), Path({str(root)!r}))
        async def main():
            p = fixture_pipeline(cfg)
            try:
                print(await exposition(p))
            finally:
                await p.aclose()
        asyncio.run(main())
    """)
    res = subprocess.run(
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c",
         script], capture_output=True, timeout=60,
    )
    assert res.returncode == 0, res.stderr.decode()
    text = res.stdout.decode()
    assert success(text, "cgroup") == 0.0
    assert success(text, "procfs") == 1.0
    values = parse_exposition(text)
    # the other cgroups are still there, the unreadable one is not
    pods = {k for k in values if k.startswith("headroom_memory_usage_bytes{")}
    assert any("4c1e0b8e" in k for k in pods)
    assert not any("15ab12cd34ef" in k for k in pods)
    errors = [line for line in res.stderr.decode().splitlines()
              if "collector cgroup failed" in line]
    assert len(errors) == 1 and "PermissionError" in errors[0]


async def test_hung_file_times_out_and_threads_do_not_pile_up(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """memory.stat replaced by a FIFO with no writer: open() blocks like a hung kernfs read."""
    root = copy_host(tmp_path)
    stat = next(root.glob("sys/fs/cgroup/kubepods.slice/kubepods-pod*.slice/crio-1*.scope"))
    real = (stat / "memory.stat").read_text()
    (stat / "memory.stat").unlink()
    os.mkfifo(stat / "memory.stat")
    os.link(stat / "memory.stat", tmp_path / "fifo")  # to reach it once the path is fixed
    cfg = on_tree(host_config(V2), root).with_settings(ScrapeSettings(collector_timeout=0.3))
    p = fixture_pipeline(cfg)
    fifo = stat / "memory.stat"
    try:
        caplog.set_level(logging.ERROR)
        first = await exposition(p)
        assert success(first, "cgroup") == 0.0 and success(first, "procfs") == 1.0
        assert "timed out after 0.3s" in caplog.text
        second = await exposition(p)
        assert success(second, "cgroup") == 0.0
        assert "still running" not in caplog.text  # the same condition, not logged again
        assert caplog.text.count("collector cgroup failed") == 1
        assert threading.active_count() < 40
        # The file comes back; the hung reader gets its EOF; the collector recovers.
        (tmp_path / "stat").write_text(real)
        os.replace(tmp_path / "stat", fifo)
        unblock(tmp_path / "fifo")
        for _ in range(50):
            await asyncio.sleep(0.05)
            text = await exposition(p)
            if success(text, "cgroup") == 1.0:
                break
        assert success(text, "cgroup") == 1.0
    finally:
        unblock(tmp_path / "fifo")
        await p.aclose()


def unblock(fifo: Path) -> None:
    """Give a blocked reader of the FIFO a writer (and EOF), if one is waiting."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return  # no reader waiting (ENXIO)
    try:
        os.write(fd, b"anon 1\n")
    except BrokenPipeError:
        pass  # the reader already gave up on it (pread on a FIFO fails with ESPIPE)
    finally:
        os.close(fd)


async def test_no_memory_controller_keeps_serving(tmp_path: Path) -> None:
    empty = tmp_path / "cgroup"
    empty.mkdir()
    with pytest.raises(CgroupLayoutError, match="no memory cgroup controller"):
        HostPaths(cgroupfs=empty).detect_memory_hierarchy()
    cfg = host_config(V2)
    p = factory.build(cfg.with_settings(replace(cfg.paths, cgroupfs=empty)))
    try:
        text = await exposition(p)
    finally:
        await p.aclose()
    assert success(text, "discovery") == 0.0
    assert "headroom_build_info" in text


async def test_missing_kubepods_path_is_a_failed_discovery(make_pipeline: list) -> None:
    p = fixture_pipeline(kubepods(host_config(V2), "kubepods-not-here"))
    make_pipeline.append(p)
    text = await exposition(p)
    assert success(text, "discovery") == 0.0


async def test_processes_coming_and_going(tmp_path: Path, make_pipeline: list) -> None:
    root = copy_host(tmp_path, "v1-cgroupfs-containerd")
    p = fixture_pipeline(on_tree(host_config("v1-cgroupfs-containerd"), root))
    make_pipeline.append(p)
    before = parse_exposition(await exposition(p))
    shutil.rmtree(root / "proc/4101")  # EngineCore exits: gone from /proc and its cgroup
    for procs in root.glob("sys/fs/cgroup/memory/kubepods/**/cgroup.procs"):
        procs.write_text(procs.read_text().replace("4101\n", ""))
    after = parse_exposition(await exposition(p))
    assert any('process="EngineCore"' in k for k in before)
    assert not any('process="EngineCore"' in k for k in after)
    assert after['headroom_collector_success{collector="procfs"}'] == 1.0


async def test_concurrent_scrapes_share_one_collection(make_pipeline: list) -> None:
    p = fixture_pipeline(host_config(V2))
    make_pipeline.append(p)
    a, b = await asyncio.gather(p.snapshot(), p.snapshot())
    assert a is b


async def test_foreign_pid_namespace_is_named(tmp_path: Path, make_pipeline: list) -> None:
    """Without hostPID, cgroup.procs shows the node's processes as 0."""
    root = copy_host(tmp_path, "v1-cgroupfs-containerd")
    for procs in root.glob("sys/fs/cgroup/memory/kubepods/**/cgroup.procs"):
        procs.write_text("".join("0\n" for _ in procs.read_text().split()))
    p = fixture_pipeline(on_tree(host_config("v1-cgroupfs-containerd"), root))
    make_pipeline.append(p)
    text = await exposition(p)
    assert success(text, "procfs") == 0.0
    assert success(text, "cgroup") == 1.0


def samplers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "headroom-sampler"]


async def test_the_sampler_starts_once_and_scrapes_never_start_it() -> None:
    """The factory builds everything; a scrape that arrives during start-up (or before it)
    cannot build or start a second sampler."""
    before = len(samplers())
    p = fixture_pipeline(host_config(V2))
    try:
        await p.snapshot()  # a scrape before start: nothing is started
        assert len(samplers()) == before
        scrapes = [asyncio.ensure_future(p.snapshot()) for _ in range(3)]
        p.start()
        p.start()  # idempotent
        scrapes += [asyncio.ensure_future(p.snapshot()) for _ in range(3)]
        await asyncio.gather(*scrapes)
        assert len(samplers()) == before + 1
        with pytest.raises(RuntimeError, match="already started"):
            p.sampler.start()
    finally:
        await p.aclose()
    assert len(samplers()) == before
