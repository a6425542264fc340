"""The source contract through the real pipeline: a source outside the core (as a new
one would be) is built from its spec, reads an earlier source's data, renders its own
family with the join's labels, and reports partial results and failures in its Result."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from exporter.catalog import MetricSpec
from exporter.collectors import procfs
from exporter.discovery import Discovery
from exporter.encode import Family, encode
from exporter.model import Labels
from exporter.paths import HostPaths
from exporter.pipeline import Named, Pipeline
from exporter.render import render
from exporter.source import Context, Key, NoSettings, Result, SourceBase, SourceSpec
from tests.conftest import HOSTS, parse_exposition

ROOT = HOSTS / "v1-cgroupfs-containerd"
PIDS = MetricSpec("headroom_test_pids", "gauge", ("namespace", "pod", "container"),
                  "Processes seen, per cgroup.")


@dataclass(frozen=True)
class PidCount:
    per_cgroup: dict[str, int]


KEY: Key[PidCount] = Key("pidcount")


class PidCountSource(SourceBase):
    """Counts procfs's processes per cgroup; ``partial``: the first cgroup is unreadable."""

    def __init__(self, partial: bool = False, crash: bool = False) -> None:
        self.partial, self.crash = partial, crash

    async def collect(self, ctx: Context) -> Result[PidCount]:
        if self.crash:
            raise OSError("the whole source failed")
        table = ctx.get(procfs.KEY)
        assert table is not None, "procfs runs first (registry order)"
        counts = {p: len(ps) for p, ps in sorted(table.processes.items())}
        if not self.partial:
            return Result(PidCount(counts))
        bad = min(counts)
        del counts[bad]
        return Result(PidCount(counts), (f"{bad}: unreadable",))


def render_pids(data: PidCount, labels: Labels) -> Iterable[Family]:
    fam = Family(PIDS)
    for path, n in sorted(data.per_cgroup.items()):
        w = labels.workloads.get(path)
        if w is not None:
            fam.add(w.labels(), n)
    return [fam]


SPEC = SourceSpec(KEY, "test", NoSettings, lambda _s, _p: PidCountSource(), render=render_pids)


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


def series(values: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in values.items() if k.startswith("headroom_test_pids")}


async def test_a_source_renders_its_own_family_with_workload_labels() -> None:
    values = await scrape(PidCountSource())
    assert values['headroom_collector_success{collector="pidcount"}'] == 1
    got = series(values)
    assert got and all('namespace="",pod="' in k for k in got)  # the join's labels
    # the same labels as the core families of that cgroup
    core = {k.split("{", 1)[1] for k in values if k.startswith("headroom_processes{")}
    assert {k.split("{", 1)[1].rstrip("}") for k in got} <= {
        c.split(',process=')[0] for c in core}


async def test_a_partial_result_is_rendered_and_reported_failed() -> None:
    full = series(await scrape(PidCountSource()))
    values = await scrape(PidCountSource(partial=True))
    assert values['headroom_collector_success{collector="pidcount"}'] == 0
    part = series(values)
    assert len(part) == len(full) - 1 and part.items() <= full.items()


async def test_a_failing_source_fails_alone() -> None:
    values = await scrape(PidCountSource(crash=True))
    assert values['headroom_collector_success{collector="pidcount"}'] == 0
    assert values['headroom_collector_success{collector="procfs"}'] == 1
    assert series(values) == {}
