"""The source contract through the real pipeline: a source outside the core is built from
its spec, reads an earlier source's data through its ``Context``, and reports partial
results and failures in its ``Result``; its data reaches the exposition by one road only,
its field in the join (a source without one renders nothing)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from exporter.assembly.discovery import Discovery
from exporter.assembly.pipeline import Named, Pipeline
from exporter.collectors import procfs
from exporter.contract.source import Context, Key, NoSettings, Result, SourceBase, SourceSpec
from exporter.exposition import render as render_module
from exporter.exposition.encode import encode
from exporter.exposition.join import Snapshot
from exporter.exposition.render import render
from exporter.host.paths import HostPaths
from tests.conftest import HOSTS, parse_exposition

ROOT = HOSTS / "v1-cgroupfs-containerd"


@dataclass(frozen=True)
class PidCount:
    per_cgroup: dict[str, int]


KEY: Key[PidCount] = Key("pidcount")


class PidCountSource(SourceBase):
    """Counts procfs's processes per cgroup; ``partial``: the first cgroup is unreadable."""

    def __init__(self, partial: bool = False, crash: bool = False) -> None:
        self.partial, self.crash = partial, crash
        self.seen: PidCount | None = None

    async def collect(self, ctx: Context) -> Result[PidCount]:
        if self.crash:
            raise OSError("the whole source failed")
        table = ctx.get(procfs.KEY)
        assert table is not None, "procfs runs first (registry order)"
        counts = {p: len(ps) for p, ps in sorted(table.processes.items())}
        if self.partial:
            del counts[min(counts)]
        self.seen = PidCount(counts)
        return Result(self.seen, (f"{min(table.processes)}: unreadable",) if self.partial else ())


SPEC = SourceSpec(KEY, "test", NoSettings, lambda _s, _p: PidCountSource())


async def scrape(source: PidCountSource) -> dict[str, float]:
    paths = HostPaths(procfs=ROOT / "proc", cgroupfs=ROOT / "sys/fs/cgroup")
    pipeline = Pipeline(
        Discovery(paths, None, ()),
        [Named(procfs.SPEC, procfs.ProcfsSource(procfs.ProcfsSettings(), paths)),
         Named(SPEC, source)],
        timeout=5)
    snapshot = await pipeline.snapshot()
    body, _ = encode(render(snapshot), None)
    return parse_exposition(body.decode())


async def test_a_source_reads_an_earlier_sources_data_and_succeeds() -> None:
    source = PidCountSource()
    values = await scrape(source)
    assert values['headroom_collector_success{collector="pidcount"}'] == 1
    assert source.seen is not None and source.seen.per_cgroup


async def test_a_partial_result_is_reported_failed() -> None:
    values = await scrape(PidCountSource(partial=True))
    assert values['headroom_collector_success{collector="pidcount"}'] == 0
    assert values['headroom_collector_success{collector="procfs"}'] == 1


async def test_a_failing_source_fails_alone() -> None:
    values = await scrape(PidCountSource(crash=True))
    assert values['headroom_collector_success{collector="pidcount"}'] == 0
    assert values['headroom_collector_success{collector="procfs"}'] == 1
    assert any(k.startswith("headroom_processes{") for k in values)


async def test_a_source_without_a_field_in_the_join_renders_nothing() -> None:
    """One road: no hook renders a source's data beside the join."""
    values = await scrape(PidCountSource())
    assert not any("pidcount" in k for k in values if not k.startswith("headroom_collector_"))
    assert not hasattr(SPEC, "render") and "families" not in {f.name for f in fields(Snapshot)}
    assert not hasattr(render_module, "source_families")
