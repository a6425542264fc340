"""NVML collector against recorded nodes (no GPU needed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pynvml
import pytest

from exporter.collectors.nvml import (
    GpuProcessUse,
    NvmlCollector,
    PynvmlApi,
    read_gpus,
)
from tests.helpers.nvml_recorded import RecordedNvmlApi

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"
MiB = 1024**2


def collector(name: str) -> NvmlCollector:
    return NvmlCollector(RecordedNvmlApi.from_file(FIXTURES / name))


def test_h100_node_devices_and_processes() -> None:
    snap = collector("h100x8.json").collect()
    assert snap.available and snap.ok
    assert [d.gpu for d in snap.devices] == [str(i) for i in range(8)]
    assert all(d.uuid.startswith("GPU-") and d.total_bytes == 81559 * MiB for d in snap.devices)
    assert snap.devices[0].used_bytes == (74318 + 532) * MiB
    assert snap.devices[7].processes == ()
    procs = snap.processes()
    assert set(procs) == {41207, 41208, 41209, 41210, 52815, 52816, 60433}
    assert procs[41209] == (GpuProcessUse("2", snap.devices[2].uuid, 74318 * MiB),)


def test_mig_node_reports_instances_not_the_parent() -> None:
    snap = collector("h100-mig.json").collect()
    assert snap.ok
    # GPU 0 is in MIG mode: its three instances (slot 1 empty), numbered as nvidia-smi -L does
    assert [d.gpu for d in snap.devices] == ["0/0", "0/1", "0/2", "1"]
    mig = snap.devices[:3]
    assert all(d.uuid.startswith("MIG-") for d in mig)
    assert {d.parent_uuid for d in mig} == {"GPU-3f7c2a18-9d4e-4b61-a8f0-2c5e7b9d1a34"}
    assert [d.total_bytes // MiB for d in mig] == [40448, 9984, 9984]
    assert snap.devices[3].parent_uuid is None
    # usedGpuMemory not available stays None: the lead must not render it as 0
    assert snap.processes()[7902] == (GpuProcessUse("0/1", mig[1].uuid, None),)
    assert snap.processes()[7731][0].used_bytes == 36038 * MiB


def test_lost_gpu_is_reported_and_the_rest_still_read() -> None:
    snap = collector("h100x8-gpu5-lost.json").collect()
    assert snap.available and not snap.ok
    assert [d.gpu for d in snap.devices] == ["0", "1", "2", "3", "4", "6", "7"]
    assert len(snap.errors) == 1 and snap.errors[0].startswith("gpu 5: NVMLError_GpuIsLost")
    assert 52816 not in snap.processes()


def test_no_driver_is_no_data_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    c = collector("no-driver.json")
    with caplog.at_level(logging.INFO, logger="exporter.collectors.nvml"):
        first, second = c.collect(), c.collect()
    assert not first.available and first.ok and first.devices == ()
    assert second == first
    assert len([r for r in caplog.records if "NVML not available" in r.message]) == 1


def test_other_init_errors_propagate() -> None:
    api = RecordedNvmlApi({"init_error": "NVMLError_NoPermission", "devices": []})
    with pytest.raises(pynvml.NVMLError_NoPermission):
        NvmlCollector(api).collect()


def test_unknown_error_name_in_a_recording_is_a_fixture_bug() -> None:
    with pytest.raises(ValueError, match="unknown NVML error"):
        RecordedNvmlApi({"init_error": "NVMLError_Nope"}).init()


def test_read_gpus_needs_only_the_protocol() -> None:
    snap = read_gpus(RecordedNvmlApi.from_file(FIXTURES / "h100x8.json"))
    assert len(snap.devices) == 8


def test_real_pynvml_on_this_host() -> None:
    """The real library: on a host without a driver this is 'no data', not an error."""
    c = NvmlCollector(PynvmlApi())
    try:
        snap = c.collect()
    finally:
        c.close()
    if snap.available:
        assert all(d.total_bytes > 0 for d in snap.devices)
    else:
        assert snap.devices == () and snap.ok
