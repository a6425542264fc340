"""A test double of ``exporter.collectors.nvml.NvmlApi``: replays a JSON recording
(tests/fixtures/nvml/README.md describes the shape) so the tests cover H100, MIG, lost-GPU
and no-driver nodes without a GPU."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml


def _nvml_error(name: str) -> pynvml.NVMLError:
    """``pynvml.NVMLError`` for a class name such as ``"NVMLError_GpuIsLost"``."""
    for code, cls in pynvml.NVMLError._valClassMapping.items():
        if cls.__name__ == name:
            return pynvml.NVMLError(code)
    raise ValueError(f"unknown NVML error name {name!r}")


@dataclass(frozen=True)
class _RecordedDevice:
    data: Mapping[str, Any]

    def check(self) -> None:
        if err := self.data.get("error"):
            raise _nvml_error(err)


class RecordedNvmlApi:
    """``NvmlApi`` replaying a JSON fixture (see tests/fixtures/nvml/README.md for the shape)."""

    def __init__(self, recording: Mapping[str, Any]) -> None:
        self._rec = recording
        self._devices = [_RecordedDevice(d) for d in recording.get("devices", [])]

    @classmethod
    def from_file(cls, path: str | Path) -> RecordedNvmlApi:
        return cls(json.loads(Path(path).read_text()))

    def init(self) -> None:
        if err := self._rec.get("init_error"):
            raise _nvml_error(err)

    def shutdown(self) -> None:
        pass

    def device_count(self) -> int:
        return len(self._devices)

    def handle(self, index: int) -> object:
        return self._devices[index]

    @staticmethod
    def _dev(handle: object) -> Mapping[str, Any]:
        assert isinstance(handle, _RecordedDevice)
        handle.check()
        return handle.data

    def uuid(self, handle: object) -> str:
        return str(self._dev(handle)["uuid"])

    def name(self, handle: object) -> str:
        return str(self._dev(handle)["name"])

    def memory(self, handle: object) -> tuple[int, int]:
        mem = self._dev(handle)["memory"]
        return int(mem["total"]), int(mem["used"])

    def mig_enabled(self, handle: object) -> bool:
        return bool(self._dev(handle).get("mig_mode", 0))

    def mig_device_count(self, handle: object) -> int:
        return int(self._dev(handle).get("max_mig_devices", 0))

    def mig_handle(self, handle: object, index: int) -> object | None:
        slots: Sequence[Mapping[str, Any] | None] = self._dev(handle).get("mig_devices", [])
        slot = slots[index] if index < len(slots) else None
        return None if slot is None else _RecordedDevice(slot)

    def processes(self, handle: object) -> list[tuple[int, int | None]]:
        dev = self._dev(handle)
        procs = [*dev.get("compute_processes", []), *dev.get("graphics_processes", [])]
        return [(int(p["pid"]), p["usedGpuMemory"]) for p in procs]


