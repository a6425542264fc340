"""``headroom generate``: one declared table; it refuses strays, missing trees and parts
that produce nothing; and a new source gets its flags, env twin, chart value and schema
entry from the registry alone."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.artifacts import chart
from exporter.artifacts.generate import (
    TABLE,
    GenerateError,
    Part,
    collect_artifacts,
    run_generate,
    strays,
)
from exporter.assembly.config import add_flags, build_config
from exporter.assembly.registry import SOURCES
from exporter.contract.settings import Settings, parse_duration, repeated, setting
from exporter.contract.source import Context, Key, Result, SourceBase, SourceSpec
from exporter.host.paths import HostPaths

ROOT = Path(__file__).resolve().parents[2]


def headroom(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the generated places and their sources (not the venvs)."""
    root = tmp_path_factory.mktemp("tree")
    for d in ("alerts", "dashboards", "charts", "exporter"):
        shutil.copytree(ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root)
    return root


def test_the_committed_tree_is_up_to_date() -> None:
    res = headroom("generate", "--check")
    assert res.returncode == 0, res.stderr
    assert "generated files are up to date" in res.stdout


@pytest.fixture(scope="module")
def produced(tree: Path) -> dict[str, str]:
    return collect_artifacts(tree)


@pytest.mark.parametrize("stray", ["charts/headroom/files/rules/old.rules.yaml",
                                   "charts/headroom/files/dashboards/old.json",
                                   "dashboards/old.json", "alerts/old.rules.yaml"])
def test_a_stray_file_in_a_generated_place_is_found(
        tree: Path, produced: dict[str, str], stray: str) -> None:
    assert strays(tree, produced) == []
    (tree / stray).write_text("groups: []\n")
    try:
        assert strays(tree, produced) == [stray]
    finally:
        (tree / stray).unlink()


def test_a_stray_rules_file_in_the_chart_fails_the_check(
        tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It would ship as an extra PrometheusRule. Writing does not delete it: a person
    decides."""
    stray = tree / "charts/headroom/files/rules/old.rules.yaml"
    stray.write_text("groups: []\n")
    try:
        assert run_generate(str(tree), check=True) == 1
        assert "charts/headroom/files/rules/old.rules.yaml" in capsys.readouterr().err
    finally:
        stray.unlink()


def test_a_missing_tree_fails() -> None:
    res = headroom("generate", "--check", "--root", "/nonexistent")
    assert res.returncode == 1
    assert "/nonexistent is not a headroom tree" in res.stderr
    assert "up to date" not in res.stdout


def test_a_part_that_produces_nothing_or_strays_fails(tree: Path) -> None:
    with pytest.raises(GenerateError, match="no parts"):
        collect_artifacts(tree, ())
    empty = Part("empty", lambda root: {}, owns=("x/*",))
    with pytest.raises(GenerateError, match="empty produced no files"):
        collect_artifacts(tree, (empty,))
    outside = Part("outside", lambda root: {"elsewhere.txt": "x"}, owns=("x/*",))
    with pytest.raises(GenerateError, match="outside its declared outputs"):
        collect_artifacts(tree, (outside,))


def test_every_generated_file_is_declared() -> None:
    files = collect_artifacts(ROOT)
    assert {p.name for p in TABLE} == {"alerts", "alertmanager", "dashboards", "chart"}
    assert any(f.startswith("charts/headroom/files/rules/") for f in files)
    assert "charts/headroom/files/alertmanager/alertmanager.yaml" in files
    assert any(f.startswith("charts/headroom/files/dashboards/") for f in files)
    assert {chart.VALUES, chart.SCHEMA, chart.FLAGS, chart.README} <= set(files)


# --- a new source, from the registry alone ---------------------------------------------


@dataclass(frozen=True)
class SwapSettings(Settings):
    interval: float = setting("--swap.interval", "15s", parse_duration, "how often to look")
    devices: tuple[str, ...] = repeated("--swap.device", str, "a swap device (repeatable)")


@dataclass(frozen=True)
class SwapData:
    used: int


SWAP: Key[SwapData] = Key("swap")


class SwapSource(SourceBase):
    async def collect(self, ctx: Context) -> Result[SwapData]:
        return Result(SwapData(0))


def _build(settings: SwapSettings, paths: HostPaths) -> SwapSource:
    return SwapSource()


NEW = SourceSpec(SWAP, "swap devices of the node", SwapSettings, _build)


def test_a_new_source_gets_flags_env_twins_chart_value_and_schema() -> None:
    sources = (*SOURCES, NEW)
    parser = argparse.ArgumentParser()
    add_flags(parser, sources)
    ns = parser.parse_args(["--swap.device=/dev/zram0", "--no-collector.swap"])
    cfg = build_config(ns, {"HEADROOM_SWAP_INTERVAL": "1m"}, sources)
    assert cfg.settings(SwapSettings) == SwapSettings(interval=60.0, devices=("/dev/zram0",))
    assert not cfg.enabled("swap")
    assert "HEADROOM_COLLECTOR_SWAP" in parser.format_help()

    values = chart.values_block(sources)
    assert "    swap: true\n" in values and "  swap:\n" in values
    assert "    interval: \"\"\n" in values and "    devices: []\n" in values
    schema = json.loads(chart.schema_json((ROOT / chart.SCHEMA).read_text(), sources))
    exporter = schema["properties"]["exporter"]["properties"]
    assert exporter["collectors"]["properties"]["swap"]["type"] == "boolean"
    assert exporter["swap"]["properties"]["interval"]["pattern"].startswith("^$|")
    flags = chart.flags_yaml(sources)
    assert "- name: swap\n" in flags and "flag: --swap.device\n    repeat: true" in flags
    assert "`exporter.swap.devices`" in chart.readme_block(sources)
