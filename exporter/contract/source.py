"""The source contract (node_exporter's ``Collector`` + ``registerCollector``).

A source is one kind of host data (cgroup files, /proc, NVML, vLLM's /metrics ...). It
declares its settings (a frozen ``Settings`` dataclass: flags, env twins, defaults, help)
and, on every scrape, returns a ``Result``: its typed data *and* its own errors. A partial
read travels as data plus errors; an exception means the source failed as a whole. Either
way the scrape goes on and ``headroom_collector_success{collector}`` says what happened.

Sources run one after another in registry order (``exporter/assembly/registry.py``); a later source
reads an earlier one's data through ``Context.get(KEY)`` (tmpfs and vLLM use procfs's
process table). Results are typed by a ``Key[D]`` declared next to the data type, so the
pipeline, the join and the renderer never see ``object``.

A source's data reaches the exposition by one road: the join (``exporter/exposition/join.py``) gives
it a typed field of the scrape's ``Snapshot`` (labelled by workload where it is keyed by
cgroup or pid), and ``exporter/exposition/render.py`` renders that field with the catalogue's specs.
A new source is its module (settings, reader, ``SPEC``), one line in the registry, its
catalogue entries, its field in the join and its function in the render table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from exporter.contract.settings import Settings
from exporter.host.paths import HostPaths, MemoryHierarchy
from exporter.model import CgroupRef, PodDirectory

D = TypeVar("D")
D_co = TypeVar("D_co", covariant=True)
S = TypeVar("S", bound=Settings)
T = TypeVar("T")


@dataclass(frozen=True)
class Key(Generic[D]):
    """Names one source's data type: ``Context.get(procfs.KEY) -> ProcfsData | None``."""

    name: str


@dataclass(frozen=True)
class Result(Generic[D_co]):
    """One source's outcome on one scrape: its data (None: nothing this time, e.g. no
    GPU driver) and the problems it met. Errors with data mean a partial read: the data is
    rendered and the source is reported failed."""

    data: D_co | None
    errors: tuple[str, ...] = ()


def partial_result(data: D, errors: list[str], what: str) -> Result[D]:
    """A result whose errors are summarised as "N <what> unreadable, first: ..."."""
    if not errors:
        return Result(data)
    return Result(data, (f"{len(errors)} {what} unreadable, first: {errors[0]}",))


@dataclass(frozen=True)
class Results:
    """Data of the sources that ran so far this scrape, by key."""

    by_name: Mapping[str, object] = field(default_factory=dict)

    def get(self, key: Key[D]) -> D | None:
        value = self.by_name.get(key.name)
        return value  # type: ignore[return-value]  # stored under its own key only

    def with_data(self, name: str, data: object) -> Results:
        """Set by the pipeline under the name of the source that produced it."""
        if data is None:
            return self
        return Results({**self.by_name, name: data})


@dataclass(frozen=True)
class Context:
    """What a source may use on one scrape. When discovery failed (no memory controller
    yet) only sources that do not need cgroups run, with no ``hierarchy`` and no refs."""

    found_hierarchy: MemoryHierarchy | None
    refs: tuple[CgroupRef, ...]  # the tracked cgroups, from discovery
    pods: PodDirectory | None  # Kubernetes names, when the API watcher runs
    results: Results  # earlier sources' data

    @property
    def hierarchy(self) -> MemoryHierarchy:
        if self.found_hierarchy is None:  # the pipeline does not run such a source then
            raise RuntimeError("no memory cgroup hierarchy on this scrape")
        return self.found_hierarchy

    def get(self, key: Key[D]) -> D | None:
        return self.results.get(key)


async def in_thread(fn: Callable[[], T]) -> T:
    """Blocking host reads run in a worker thread: nothing blocks the event loop.
    (run_in_executor, not to_thread: no context copy on the scrape path.)"""
    return await asyncio.get_running_loop().run_in_executor(None, fn)


class Source(Protocol[D_co]):
    """One source, built once by its ``SourceSpec.build`` and kept for the process's life
    (it may hold caches and open files between scrapes)."""

    async def collect(self, ctx: Context) -> Result[D_co]: ...

    async def run(self) -> None:
        """Background work for the process's life (a watch stream); most have none."""

    async def aclose(self) -> None: ...


class SourceBase:
    """Defaults for the optional parts of ``Source``."""

    async def run(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class SourceSpec(Generic[S, D]):
    """A registry entry: ``--collector.<name>``, its settings and how to build it."""

    key: Key[D]  # its name is the collector label and flag name, written only there
    help: str
    settings: type[S]
    # None: the source cannot run on this host (e.g. no Kubernetes API): it is left out.
    build: Callable[[S, HostPaths], Source[D] | None]
    default_enabled: bool = True
    chart: bool = True  # an exporter.collectors.<name> chart value (kubernetes: no)
    needs_cgroups: bool = True  # False: also runs when discovery failed (GPU, API health)

    @property
    def name(self) -> str:
        return self.key.name

    def make(self, settings: Settings, paths: HostPaths) -> Source[D] | None:
        if not isinstance(settings, self.settings):
            raise TypeError(f"{self.name}: settings of type {type(settings).__name__}")
        return self.build(settings, paths)


class Registered(Protocol):
    """A registry entry whatever its types (what the registry, config and pipeline see)."""

    @property
    def name(self) -> str: ...
    @property
    def help(self) -> str: ...
    @property
    def settings(self) -> type[Settings]: ...
    @property
    def default_enabled(self) -> bool: ...
    @property
    def chart(self) -> bool: ...
    @property
    def needs_cgroups(self) -> bool: ...

    def make(self, settings: Settings, paths: HostPaths) -> Source[object] | None: ...


@dataclass(frozen=True)
class NoSettings(Settings):
    """For a source without settings of its own."""
