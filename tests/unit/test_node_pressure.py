"""The node's memory pressure source: PSI and vmstat parsers against the kernel's text, and
its failures (a kernel without PSI is no failure; an unreadable file is) through the real
pipeline."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

from exporter.collectors.node_pressure import (
    NodePressureSource,
    parse_psi,
    parse_vmstat,
    read_node_pressure,
)
from exporter.factory import Exporter
from exporter.paths import HostPaths
from tests.conftest import HOSTS, exposition, fixture_pipeline, host_config, on_tree

PSI_6X = ("some avg10=12.50 avg60=3.00 avg300=0.75 total=98765432\n"
          "full avg10=0.00 avg60=0.10 avg300=0.00 total=1234\n")


def test_psi_lines_become_ratios_and_seconds() -> None:
    got = parse_psi(PSI_6X)
    assert got["some"].averages == {"10s": 0.125, "60s": 0.03}
    assert got["some"].total_seconds == pytest.approx(98.765432)
    assert got["full"].averages == {"10s": 0.0, "60s": 0.001}


def test_a_psi_line_without_its_total_is_an_error() -> None:
    with pytest.raises(ValueError, match="some"):
        parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00\n")


def test_vmstat_keeps_only_the_reclaimers_and_oom_kill() -> None:
    got = parse_vmstat("nr_free_pages 9\npgscan_kswapd 7\npgscan_anon 99\npgsteal_direct 3\n"
                       "pgscan_direct_throttle 5\noom_kill 4\npgscan_kswapd_normal 8\n")
    assert got.scanned == {"kswapd": 7} and got.reclaimed == {"direct": 3}
    assert got.oom_kills == 4


def test_an_old_kernel_has_no_oom_kill_counter() -> None:
    assert parse_vmstat("pgscan_kswapd 1\n").oom_kills is None


@pytest.mark.parametrize("text", [
    "", "\n\n", "some\n", "some avg10=1e999 avg60=nan avg300=0 total=-1\n",
    "full avg10=0.0 avg60=0.0 total=99999999999999999999999\n", "some =\x00 ==\n",
])
def test_hostile_psi_text_is_parsed_or_refused_with_valueerror(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_psi(text)


@pytest.mark.parametrize("text", ["oom_kill\n", "pgscan_kswapd 1 2\n", "oom_kill x\n",
                                  " \n", "pgsteal_direct -\n"])
def test_hostile_vmstat_text_is_parsed_or_refused_with_valueerror(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_vmstat(text)


def tree(tmp_path: Path, host: str = "v2-systemd-mixed") -> Path:
    root = tmp_path / host
    shutil.copytree(HOSTS / host, root, symlinks=True)
    return root


def test_no_psi_file_is_not_a_failure(tmp_path: Path) -> None:
    root = tree(tmp_path)
    (root / "proc/pressure/memory").unlink()
    result = read_node_pressure(HostPaths(procfs=root / "proc"))
    assert result.errors == () and result.data is not None
    assert result.data.stalls == {} and result.data.scanned


def test_a_broken_file_is_an_error_and_the_other_still_counts(tmp_path: Path) -> None:
    root = tree(tmp_path)
    (root / "proc/vmstat").write_text("pgscan_kswapd lots\n")
    result = read_node_pressure(HostPaths(procfs=root / "proc"))
    assert len(result.errors) == 1 and "vmstat" in result.errors[0]
    assert result.data is not None and set(result.data.stalls) == {"some", "full"}


def test_both_files_gone_is_no_data() -> None:
    result = read_node_pressure(HostPaths(procfs=Path("/nonexistent")))
    assert result.data is None and len(result.errors) == 1  # a missing PSI file is no error


async def test_a_partial_read_is_rendered_and_reported_failed(
        tmp_path: Path, make_pipeline: list[Exporter]) -> None:
    root = tree(tmp_path)
    (root / "proc/pressure/memory").write_text("some avg10=x\n")
    p = fixture_pipeline(on_tree(host_config("v2-systemd-mixed"), root))
    make_pipeline.append(p)
    text = await exposition(p)
    assert 'headroom_collector_success{collector="node_pressure"} 0' in text
    assert 'headroom_collector_success{collector="cgroup"} 1' in text
    assert 'headroom_node_memory_pages_scanned_total{reclaimer="kswapd"} 90000' in text
    assert "headroom_node_memory_pressure_ratio" not in text


async def test_the_source_reads_in_a_worker_thread() -> None:
    source = NodePressureSource(HostPaths(procfs=HOSTS / "v2-kind-nopsi" / "proc"))
    result = await source.collect(None)  # type: ignore[arg-type]  # it reads no context
    assert result.errors == () and result.data is not None and result.data.oom_kills == 0
