"""``headroom generate``: write (or check) every generated file of the repository, from one
declared table: which part produces which files, and where the chart keeps copies.

It fails on a part that produces nothing, on a file it produces outside the paths the
table declares for it, on a file in a generated place that no part produces (a stray
``charts/headroom/files/rules/old.rules.yaml`` would ship as an extra PrometheusRule), and
on a directory that is not a headroom tree.
"""

from __future__ import annotations

import fnmatch
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.artifacts import chart


@dataclass(frozen=True)
class Part:
    name: str
    produce: Callable[[Path], Mapping[str, str]]  # repo root -> {repo-relative path: text}
    owns: tuple[str, ...]  # globs of the repo files this part generates, wholly
    chart_copies: str | None = None  # chart folder holding a copy of each owned file ...
    copy_glob: str = "*"  # ... whose name matches this


# The authoring libraries of the dashboards (grafanalib and its attrs), installed by the
# ``generate`` extra only: the exporter's image never draws a dashboard.
GENERATE_EXTRA_MODULES = ("grafanalib", "attr")
GENERATE_EXTRA_HINT = "pip install 'vllm-headroom[generate]'"
# The exit status of a missing extra: the command cannot run as installed (a usage error).
MISSING_EXTRA = 2


class MissingExtra(Exception):
    """A part needs a module of the ``generate`` extra that is not installed."""


def _artifacts_of(module: str) -> Callable[[Path], Mapping[str, str]]:
    """The ``artifacts()`` of a module of the tree being generated."""
    def produce(root: Path) -> Mapping[str, str]:
        sys.path.insert(0, str(root))
        try:
            found: Mapping[str, str] = importlib.import_module(module).artifacts()
            return found
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").partition(".")[0]
            if missing not in GENERATE_EXTRA_MODULES:
                raise
            raise MissingExtra(f"{module} needs {missing}, which the generate extra "
                               f"installs: {GENERATE_EXTRA_HINT}") from exc
        finally:
            sys.path.remove(str(root))
    return produce


def _chart(root: Path) -> Mapping[str, str]:
    return chart.artifacts(lambda rel: (root / rel).read_text())


CHART_FILES = "charts/headroom/files"
TABLE: tuple[Part, ...] = (
    Part("alerts", _artifacts_of("alerts.generate"),
         owns=("alerts/*.rules.yaml", "alerts/promtool/*.test.yaml"),
         chart_copies=f"{CHART_FILES}/rules", copy_glob="*.rules.yaml"),
    Part("alertmanager", _artifacts_of("alerts.alertmanager"), owns=("alerts/alertmanager.yaml",),
         chart_copies=f"{CHART_FILES}/alertmanager", copy_glob="alertmanager.yaml"),
    Part("dashboards", _artifacts_of("dashboards.generate"), owns=("dashboards/*.json",),
         chart_copies=f"{CHART_FILES}/dashboards", copy_glob="*.json"),
    Part("chart", _chart, owns=(chart.FLAGS, chart.VALUES, chart.SCHEMA, chart.README)),
)
# Markers of a headroom tree: refuse to write anywhere else.
TREE_MARKERS = ("pyproject.toml", "exporter/assembly/registry.py", "charts/headroom/Chart.yaml")


class GenerateError(Exception):
    pass


def _matches(rel: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(rel, g) for g in globs)


def collect_artifacts(root: Path, table: tuple[Part, ...] = TABLE) -> dict[str, str]:
    """Repository-relative path -> content, chart copies included."""
    missing = [m for m in TREE_MARKERS if not (root / m).exists()]
    if missing:
        raise GenerateError(f"{root} is not a headroom tree (no {', '.join(missing)})")
    if not table:
        raise GenerateError("no parts to generate")
    out: dict[str, str] = {}
    for part in table:
        files = dict(part.produce(root))
        if not files:
            raise GenerateError(f"{part.name} produced no files")
        for rel, content in sorted(files.items()):
            if not _matches(rel, part.owns):
                raise GenerateError(f"{part.name} produced {rel}, outside its declared "
                                    f"outputs {part.owns} (exporter/artifacts/generate.py TABLE)")
            out[rel] = content
            if part.chart_copies and fnmatch.fnmatchcase(Path(rel).name, part.copy_glob):
                out[f"{part.chart_copies}/{Path(rel).name}"] = content
    return out


def strays(root: Path, produced: Mapping[str, str], table: tuple[Part, ...] = TABLE) -> (
    list[str]
):
    """Files in generated places that no part produces."""
    found = []
    for part in table:
        places = [*part.owns, *([f"{part.chart_copies}/*"] if part.chart_copies else [])]
        for glob in places:
            for path in root.glob(glob):
                rel = path.relative_to(root).as_posix()
                if path.is_file() and rel not in produced:
                    found.append(rel)
    return sorted(set(found))


def run_generate(root_arg: str, check: bool) -> int:
    root = Path(root_arg).resolve()
    try:
        artifacts = collect_artifacts(root)
    except MissingExtra as exc:
        print(f"headroom generate: {exc}", file=sys.stderr)
        return MISSING_EXTRA
    except GenerateError as exc:
        print(f"headroom generate: {exc}", file=sys.stderr)
        return 1
    stale = []
    for rel, content in sorted(artifacts.items()):
        path = root / rel
        current = path.read_text() if path.exists() else None
        if current == content:
            continue
        if check:
            stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            print(f"wrote {rel}")
    extra = strays(root, artifacts)
    if stale:
        print("stale generated files (run `headroom generate`):\n  " + "\n  ".join(stale),
              file=sys.stderr)
    if extra:
        print("files in generated places that nothing generates (delete them):\n  "
              + "\n  ".join(extra), file=sys.stderr)
    if stale or extra:
        return 1
    if check:
        print(f"{len(artifacts)} generated files are up to date")
    return 0
