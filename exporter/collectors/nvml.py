"""GPU memory per device and per process, from NVML.

``NvmlApi`` is the handful of NVML calls headroom uses. ``PynvmlApi`` is the real one over
``pynvml`` (the nvidia-ml-py distribution); the tests replay recorded answers through the
same protocol (tests/nvml_recorded.py) to cover H100, MIG, lost-GPU and no-driver nodes
without a GPU. ``read_gpus`` walks the devices through the protocol and returns one frozen
``NvmlSnapshot``.

Labels: ``gpu`` is the NVML index of a whole GPU (``"3"``); a MIG instance is
``"<parent index>/<n>"`` where n counts the parent's MIG devices in order, as ``nvidia-smi -L``
numbers them (``"0/1"``). In MIG mode the parent itself is not reported: its memory is the
sum of its instances, so reporting both would count it twice in any sum by ``gpu``.

Pids are as NVML sees them: host pids (the exporter runs with hostPID); ``join.py`` maps
them to workloads through the procfs source's process table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import pynvml

from exporter.contract.source import (
    Context,
    Key,
    NoSettings,
    Result,
    SourceBase,
    SourceSpec,
    in_thread,
)
from exporter.host.paths import HostPaths

log = logging.getLogger(__name__)

# Library or driver absent: the node simply has no NVIDIA GPU for us. Not a failure.
_NO_DRIVER_ERRORS: tuple[type[Exception], ...] = (
    pynvml.NVMLError_LibraryNotFound,
    pynvml.NVMLError_DriverNotLoaded,
)


@dataclass(frozen=True)
class GpuProcess:
    """One process seen on one device (``processes`` below)."""

    pid: int
    used_bytes: int | None  # None: NVML reports "not available" (e.g. no privilege, WDDM)


@dataclass(frozen=True)
class GpuDevice:
    gpu: str  # label value: "0", or "0/1" for the second MIG instance of GPU 0
    uuid: str  # GPU-... or MIG-...
    name: str
    total_bytes: int
    used_bytes: int
    parent_uuid: str | None = None  # the physical GPU of a MIG instance
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class GpuProcessUse:
    """One process's use of one device, as the lead joins it (pid -> list of these)."""

    gpu: str
    uuid: str
    used_bytes: int | None


@dataclass(frozen=True)
class NvmlSnapshot:
    available: bool  # False: no NVML library or driver on this host ("no data")
    devices: tuple[GpuDevice, ...] = ()
    # Devices that answered with an error (lost GPU, ...): "gpu 3: NVMLError_GpuIsLost ..."
    errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every device answered (also when NVML is simply absent)."""
        return not self.errors

    def processes(self) -> Mapping[int, tuple[GpuProcessUse, ...]]:
        """pid -> the devices it uses, with bytes (None where NVML does not know)."""
        out: dict[int, list[GpuProcessUse]] = {}
        for dev in self.devices:
            for p in dev.processes:
                out.setdefault(p.pid, []).append(GpuProcessUse(dev.gpu, dev.uuid, p.used_bytes))
        return {pid: tuple(uses) for pid, uses in sorted(out.items())}


class NvmlApi(Protocol):
    """The NVML calls headroom makes. Handles are opaque; errors are ``pynvml.NVMLError``."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def device_count(self) -> int: ...
    def handle(self, index: int) -> object: ...
    def uuid(self, handle: object) -> str: ...
    def name(self, handle: object) -> str: ...
    def memory(self, handle: object) -> tuple[int, int]:
        """(total, used) bytes."""
        ...
    def mig_enabled(self, handle: object) -> bool: ...
    def mig_device_count(self, handle: object) -> int:
        """Upper bound of MIG device indices (nvmlDeviceGetMaxMigDeviceCount)."""
        ...
    def mig_handle(self, handle: object, index: int) -> object | None:
        """The MIG device at that index, or None where the slot is empty."""
        ...
    def processes(self, handle: object) -> list[tuple[int, int | None]]:
        """(pid, used bytes or None) of compute and graphics processes."""
        ...


class PynvmlApi:
    """``NvmlApi`` over the real library."""

    def init(self) -> None:
        pynvml.nvmlInit()

    def shutdown(self) -> None:
        pynvml.nvmlShutdown()

    def device_count(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    def handle(self, index: int) -> object:
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def uuid(self, handle: object) -> str:
        return str(pynvml.nvmlDeviceGetUUID(handle))

    def name(self, handle: object) -> str:
        return str(pynvml.nvmlDeviceGetName(handle))

    def memory(self, handle: object) -> tuple[int, int]:
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.total), int(info.used)

    def mig_enabled(self, handle: object) -> bool:
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        except pynvml.NVMLError_NotSupported:  # pre-Ampere GPUs have no MIG
            return False
        return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)

    def mig_device_count(self, handle: object) -> int:
        return int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))

    def mig_handle(self, handle: object, index: int) -> object | None:
        try:
            mig: object = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError_NotFound:
            return None
        return mig

    def processes(self, handle: object) -> list[tuple[int, int | None]]:
        procs = [
            *pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
            *pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
        ]
        # pynvml already maps NVML_VALUE_NOT_AVAILABLE to None
        return [(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                for p in procs]


def _read_device(api: NvmlApi, handle: object, gpu: str, parent: str | None) -> GpuDevice:
    total, used = api.memory(handle)
    return GpuDevice(
        gpu=gpu,
        uuid=api.uuid(handle),
        name=api.name(handle),
        total_bytes=total,
        used_bytes=used,
        parent_uuid=parent,
        processes=tuple(GpuProcess(pid, mem) for pid, mem in api.processes(handle)),
    )


def _read_gpu(api: NvmlApi, index: int) -> list[GpuDevice]:
    handle = api.handle(index)
    if not api.mig_enabled(handle):
        return [_read_device(api, handle, str(index), None)]
    parent = api.uuid(handle)
    devices: list[GpuDevice] = []
    for slot in range(api.mig_device_count(handle)):
        mig = api.mig_handle(handle, slot)
        if mig is not None:
            devices.append(_read_device(api, mig, f"{index}/{len(devices)}", parent))
    return devices


def read_gpus(api: NvmlApi) -> NvmlSnapshot:
    """Every device's memory and processes; NVML must be initialised.

    A device that fails (GPU lost, ...) is left out and named in ``errors``; the others
    are still reported.
    """
    devices: list[GpuDevice] = []
    errors: list[str] = []
    for index in range(api.device_count()):
        try:
            devices.extend(_read_gpu(api, index))
        except pynvml.NVMLError as exc:
            errors.append(f"gpu {index}: {type(exc).__name__}: {exc}")
    return NvmlSnapshot(available=True, devices=tuple(devices), errors=tuple(errors))


@dataclass
class NvmlCollector:
    """Initialises NVML once and reads it on every call to ``collect``.

    No library or driver gives ``NvmlSnapshot(available=False)``, logged once: such a node
    simply has no GPU for us. Initialisation is retried on each collect (cheap: a failed
    dlopen), so a driver installed later is picked up. Not thread-safe; call it from one
    executor thread at a time.
    """

    api: NvmlApi = field(default_factory=PynvmlApi)
    _initialised: bool = False
    _absence_logged: bool = False

    def collect(self) -> NvmlSnapshot:
        if not self._initialised:
            try:
                self.api.init()
            except _NO_DRIVER_ERRORS as exc:
                if not self._absence_logged:
                    log.info("NVML not available (%s): no GPU metrics on this host", exc)
                    self._absence_logged = True
                return NvmlSnapshot(available=False)
            self._initialised = True
        return read_gpus(self.api)

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            try:
                self.api.shutdown()
            except pynvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)


# --- the source ------------------------------------------------------------------------

KEY: Key[NvmlSnapshot] = Key("nvml")


class NvmlSource(SourceBase):
    """NVML calls block (a lost GPU can hang them): a worker thread; the pipeline never
    starts a second one while the first has not returned."""

    def __init__(self, collector: NvmlCollector | None = None) -> None:
        self._nvml = collector or NvmlCollector()

    async def collect(self, ctx: Context) -> Result[NvmlSnapshot]:
        snap = await in_thread(self._nvml.collect)
        if not snap.available:
            return Result(None)  # no driver on this node: no data, not a failure
        return Result(snap, snap.errors)

    async def aclose(self) -> None:
        self._nvml.close()


def _build(_settings: NoSettings, _paths: HostPaths) -> NvmlSource:
    return NvmlSource()


SPEC = SourceSpec(KEY, "GPU memory per device and per process (NVML)", NoSettings, _build,
                  needs_cgroups=False)
