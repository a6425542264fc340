"""Shared test helpers: fixture host trees, a pipeline over them, golden files."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.collectors.tmpfs import TmpfsCollector
from exporter.config import Config
from exporter.model import ContainerInfo, PodInfo
from exporter.paths import HostPaths
from exporter.pipeline import Pipeline
from exporter.render import encode, render

FIXTURES = Path(__file__).parent / "fixtures"
HOSTS = FIXTURES / "hosts"
GOLDEN = Path(__file__).parent / "golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite golden files from the current output (review the diff)")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def fixture_statvfs(path: Path) -> tuple[int, int]:
    """statvfs(2) of a tmpfs in a fixture tree: the numbers recorded beside the mount."""
    doc = json.loads((path / ".statvfs.json").read_text())
    used = (doc["f_blocks"] - doc["f_bfree"]) * doc["f_frsize"]
    return used, doc["f_blocks"] * doc["f_frsize"]


class StaticPods:
    """A PodDirectory over recorded pod data (the API watcher is tested in test_kube)."""

    def __init__(self, pods: Mapping[str, PodInfo]) -> None:
        self._pods = dict(pods)

    def lookup(self, pod_uid: str) -> PodInfo | None:
        return self._pods.get(pod_uid)


def recorded_pods() -> StaticPods:
    doc = json.loads((FIXTURES / "pods-on-node.json").read_text())
    return StaticPods({
        p["uid"]: PodInfo(
            uid=p["uid"], namespace=p["namespace"], name=p["name"],
            containers=tuple(ContainerInfo(c["name"], c["id"]) for c in p["containers"]),
        )
        for p in doc
    })


def host_config(host: str, **overrides: object) -> Config:
    root = HOSTS / host
    cfg = Config(procfs=root / "proc", cgroupfs=root / "sys/fs/cgroup",
                 collectors=frozenset({"cgroup", "procfs", "tmpfs"}),
                 procfs_pss_max_rss=4 << 30)
    return replace(cfg, **overrides)  # type: ignore[arg-type]


def fixture_pipeline(cfg: Config, pods: StaticPods | None = None) -> Pipeline:
    paths = HostPaths(procfs=cfg.procfs, cgroupfs=cfg.cgroupfs)
    pipeline = Pipeline(cfg, paths, pods=pods)
    h = pipeline.hierarchy()
    pipeline._tmpfs = TmpfsCollector(paths, h, statvfs=fixture_statvfs)
    return pipeline


@pytest.fixture
async def make_pipeline() -> AsyncIterator[list[Pipeline]]:
    made: list[Pipeline] = []
    yield made
    for p in made:
        p.close()


_DURATION = re.compile(r"^(headroom_collector_duration_seconds\{[^}]*\}) .*$", re.M)
# The exporter's own process figures change from run to run: golden files leave them out.
_SELF = re.compile(r"^(# (HELP|TYPE) )?process_[a-z_]+.*\n", re.M)


async def exposition(pipeline: Pipeline) -> str:
    snap = await pipeline.snapshot()
    body, _ = encode(render(snap, pipeline.sections()), None)
    return _SELF.sub("", _DURATION.sub(r"\1 0.0", body.decode()))


def parse_exposition(text: str) -> dict[str, float]:
    """'name{labels}' -> value, labels in exposition order."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
