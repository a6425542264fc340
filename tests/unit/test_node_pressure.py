"""The node's memory pressure source: PSI and vmstat parsers against the kernel's text, and
its failures (a kernel without PSI is no failure; an unreadable file is) through the real
pipeline."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from exporter.assembly.factory import Exporter
from exporter.collectors.node_pressure import (
    NodePressure,
    NodePressureSource,
    Stall,
    parse_psi,
    parse_vmstat,
    read_node_pressure,
)
from exporter.host.paths import HostPaths
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


@pytest.mark.parametrize(("text", "want"), [
    ("", {}),
    ("\n\n", {}),
    ("other avg10=1.00 avg60=1.00 total=1\n", {}),  # a level PSI may add later: ignored
    ("full avg10=0.00 avg60=0.10 total=18446744073709551615\n",
     {"full": Stall({"10s": 0.0, "60s": 0.001}, 18446744073709551615 / 1e6)}),
])
def test_psi_text_parses_to_exactly_these_stalls(text: str, want: dict[str, Stall]) -> None:
    assert parse_psi(text) == want


@pytest.mark.parametrize("text", [
    "some\n",  # no averages, no total
    "some =\x00 ==\n",
    "some avg10=1e999 avg60=0.00 total=1\n",  # infinite
    "some avg10=nan avg60=0.00 total=1\n",
    "some avg10=0.00 avg60=0.00 total=-1\n",  # a negative stall time
    "some avg10=100.01 avg60=0.00 total=1\n",  # more than all of the time
    "some avg10=-0.50 avg60=0.00 total=1\n",
    "full avg10=0.00 avg60=0.00 total=18446744073709551616\n",  # past 64 bits
    "some avg10=\uff11.00 avg60=0.00 total=1\n",  # a digit Python reads, the kernel never writes
])
def test_hostile_psi_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="PSI line"):
        parse_psi(text)


@pytest.mark.parametrize(("text", "want"), [
    (" \n", NodePressure()),
    ("pgscan_kswapd 12\npgscan_kswapd_normal x\noom_kill 0\n",
     NodePressure({}, {"kswapd": 12}, {}, 0)),
])
def test_vmstat_text_parses_to_exactly_these_counters(text: str, want: NodePressure) -> None:
    assert parse_vmstat(text) == want


@pytest.mark.parametrize("text", ["oom_kill\n", "pgscan_kswapd 1 2\n", "oom_kill x\n",
                                  "pgsteal_direct -\n", "oom_kill -3\n", "oom_kill 1.5\n",
                                  "pgscan_direct 18446744073709551616\n", "oom_kill \uff13\n"])
def test_hostile_vmstat_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a counter"):
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


def test_bytes_that_are_not_utf8_spoil_only_their_own_line(tmp_path: Path) -> None:
    """Counters beside an undecodable line still count; an undecodable PSI figure is a
    failure of that file, not a guessed number."""
    root = tree(tmp_path)
    (root / "proc/vmstat").write_bytes(b"pgscan_kswapd 7\n\xff\xfepgscan_direct 3\n"
                                       b"pgscan_direct\xc3\x28 9\noom_kill 2\n")
    (root / "proc/pressure/memory").write_bytes(
        b"some avg10=1.\xe900 avg60=0.00 avg300=0.00 total=1\n")
    result = read_node_pressure(HostPaths(procfs=root / "proc"))
    assert result.data is not None
    assert result.data.scanned == {"kswapd": 7} and result.data.oom_kills == 2
    assert result.data.stalls == {}
    assert len(result.errors) == 1 and result.errors[0].startswith("pressure/memory: ")


@pytest.mark.parametrize(("name", "reads_before"), [
    ("stat", 0),  # gone between open and the first read
    ("cmdline", 1),  # gone after the first read, before the end of the file
])
def test_a_file_that_vanishes_while_read_is_an_error_of_that_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, reads_before: int) -> None:
    """vmstat stands in for a /proc/<pid> file whose process is reaped while it is read:
    the kernel answers ESRCH on the open descriptor."""
    root = tree(tmp_path)
    child = subprocess.Popen(["sleep", "60"])
    # Popen returns once exec has begun; cmdline reads empty until the new image's
    # arguments are set up (a race a loaded machine loses).
    deadline = time.monotonic() + 30
    while not Path(f"/proc/{child.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    (root / "proc/vmstat").unlink()
    (root / "proc/vmstat").symlink_to(f"/proc/{child.pid}/{name}")
    real_read, reads = os.read, [0]

    def read(fd: int, n: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}") == f"/proc/{child.pid}/{name}":
            if reads[0] == reads_before and child.poll() is None:
                child.kill()
                child.wait()
            reads[0] += 1
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", read)
    try:
        result = read_node_pressure(HostPaths(procfs=root / "proc"))
    finally:
        child.kill()
        child.wait()
    assert reads[0] == reads_before + 1  # the read that met the reaped process
    assert result.errors == (f"vmstat: {OSError(errno.ESRCH, os.strerror(errno.ESRCH))}",)
    assert result.data is not None and set(result.data.stalls) == {"some", "full"}
    assert result.data.scanned == {} and result.data.oom_kills is None


CAP = 64 * 1024  # what the source promises to read of a file at most


def test_a_file_past_the_cap_is_read_only_to_the_cap(tmp_path: Path) -> None:
    """Counters past the first 64 KiB are never seen, and the line the cap cuts in two
    is dropped rather than read as its first digits."""
    root = tree(tmp_path)
    lines = b"pgscan_kswapd 7\n" + b"nr_filler 0\n" * ((CAP - 100) // 12)
    cut = b"pgscan_direct "
    pad = CAP - len(lines) - len(cut) - 4 - len(b"nr_pad \n")
    head = lines + b"nr_pad " + b"0" * pad + b"\n" + cut
    assert len(head) + 4 == CAP  # the cap falls after "1234" of "123456789"
    (root / "proc/vmstat").write_bytes(head + b"123456789\noom_kill 5\n")
    result = read_node_pressure(HostPaths(procfs=root / "proc"))
    assert result.errors == () and result.data is not None
    assert result.data.scanned == {"kswapd": 7}
    assert result.data.oom_kills is None
