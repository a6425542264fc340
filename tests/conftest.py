"""Shared test helpers: fixture host trees, a pipeline over them, golden files."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.assembly import factory
from exporter.assembly.config import DiscoverySettings, ExporterConfig, PathSettings
from exporter.assembly.factory import Exporter
from exporter.assembly.registry import NAMES
from exporter.collectors.procfs import ProcfsSettings
from exporter.collectors.tmpfs import TmpfsSource
from exporter.contract.source import Source
from exporter.exposition.encode import encode
from exporter.exposition.render import render
from exporter.host.paths import HostPaths
from exporter.model import ContainerInfo, PodInfo

FIXTURES = Path(__file__).parent / "fixtures"
HOSTS = FIXTURES / "hosts"
GOLDEN = Path(__file__).parent / "golden"


# The tier of a test is the folder it is in. A test that needs more than its folder's tier
# promises (root, the Prometheus binaries, a vLLM, a guest kernel, hypothesis, a sandbox)
# says so with its own marker and takes no tier marker, so `pytest -m "unit or golden"`
# runs anywhere. Every test in oncall/ is also marked `oncall`.
TESTS = Path(__file__).parent
TIER_OF_FOLDER = {"unit": "unit", "golden": "golden", "kernel": "kernel", "e2e": "e2e",
                  "oncall": "unit"}
NEEDS_MORE = ("kernel", "prometheus", "vllm", "v2guest", "fuzz", "sandbox")


def tier_folder(path: Path) -> str | None:
    """The tier folder a test file is in (tests/<folder>/...), or None."""
    try:
        parts = path.relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIER_OF_FOLDER else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    outside = sorted({i.nodeid.split("::", 1)[0] for i in items if tier_folder(i.path) is None})
    if outside:
        raise pytest.UsageError(
            f"test files in no tier folder: {', '.join(outside)}. Move each into "
            f"tests/{{{','.join(TIER_OF_FOLDER)}}}/: the folder is its tier (shared code "
            "goes in tests/helpers/)")
    for item in items:
        folder = tier_folder(item.path)
        assert folder is not None
        if folder == "oncall":
            item.add_marker("oncall")
        if not any(item.get_closest_marker(m) for m in NEEDS_MORE):
            item.add_marker(TIER_OF_FOLDER[folder])


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


# Sources that need a GPU, a vLLM or an API server: test_extensions and test_kube run
# them against recorded stand-ins; tmpfs_orphans needs a kernel's file descriptors,
# mappings and devices (test_tmpfs_orphans runs it on the real one). Every other
# registered source runs on the host trees.
NOT_ON_HOST_TREES = frozenset({"nvml", "vllm", "kubernetes", "tmpfs_orphans"})


def host_config(host: str) -> ExporterConfig:
    root = HOSTS / host
    return ExporterConfig(collectors=frozenset(NAMES) - NOT_ON_HOST_TREES).with_settings(
        PathSettings(procfs=root / "proc", cgroupfs=root / "sys/fs/cgroup"),
        ProcfsSettings(pss_max_rss=4 << 30),
    )


def on_tree(cfg: ExporterConfig, root: Path) -> ExporterConfig:
    """The config pointed at a copy of a fixture tree."""
    return cfg.with_settings(replace(cfg.paths, procfs=root / "proc",
                                     cgroupfs=root / "sys/fs/cgroup"))


def kubepods(cfg: ExporterConfig, path: str) -> ExporterConfig:
    return cfg.with_settings(DiscoverySettings(kubepods_path=path))


def fixture_pipeline(cfg: ExporterConfig, pods: StaticPods | None = None,
                     replace_sources: Mapping[str, Source[object]] | None = None) -> Exporter:
    """The real exporter over a fixture tree; tmpfs sizes come from the recorded statvfs.
    Not started: no sampler thread, so the figures are the tree's."""
    paths = HostPaths(procfs=cfg.paths.procfs, cgroupfs=cfg.paths.cgroupfs)
    sources: dict[str, Source[object]] = {"tmpfs": TmpfsSource(paths, statvfs=fixture_statvfs)}
    sources.update(replace_sources or {})
    return factory.build(cfg, replace=sources, pods=pods)


@pytest.fixture
async def make_pipeline() -> AsyncIterator[list[Exporter]]:
    made: list[Exporter] = []
    yield made
    for p in made:
        await p.aclose()


_DURATION = re.compile(r"^(headroom_collector_duration_seconds\{[^}]*\}) .*$", re.M)
# The exporter's own process figures change from run to run: golden files leave them out.
_SELF = re.compile(r"^(# (HELP|TYPE) )?process_[a-z_]+.*\n", re.M)


async def exposition(pipeline: Exporter) -> str:
    snap = await pipeline.snapshot()
    body, _ = encode([*render(snap), *pipeline.self_metrics.families()], None)
    return _SELF.sub("", _DURATION.sub(r"\1 0.0", body.decode()))


def parse_exposition(text: str) -> dict[str, float]:
    """'name{labels}' -> value, labels in exposition order."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
