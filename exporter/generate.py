"""``headroom generate``: write (or check) every generated file of the repository.

The rules come from ``alerts/`` and the dashboards from ``dashboards/``; both are copied
into the Helm chart, so the chart can never ship rules or dashboards other than these.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

CHART_FILES = "charts/headroom/files"
# (module with an ``artifacts() -> dict[str, str]`` function, chart subfolder for copies)
SOURCES: tuple[tuple[str, str, str], ...] = (
    ("alerts.generate", "alerts/", "rules"),
    ("dashboards.generate", "dashboards/", "dashboards"),
)


def collect_artifacts(root: Path) -> dict[str, str]:
    """Repository-relative path -> content, chart copies included."""
    sys.path.insert(0, str(root))
    try:
        out: dict[str, str] = {}
        for module_name, _, chart_dir in SOURCES:
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name != module_name and not module_name.startswith(str(exc.name)):
                    raise
                continue  # not written yet
            artifacts: Callable[[], dict[str, str]] = module.artifacts
            for rel, content in sorted(artifacts().items()):
                out[rel] = content
                if rel.endswith((".rules.yaml", ".json")):
                    out[f"{CHART_FILES}/{chart_dir}/{Path(rel).name}"] = content
        return out
    finally:
        sys.path.remove(str(root))


def run_generate(root_arg: str, check: bool) -> int:
    root = Path(root_arg).resolve()
    artifacts = collect_artifacts(root)
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
    if stale:
        print("stale generated files (run `headroom generate`):\n  " + "\n  ".join(stale),
              file=sys.stderr)
        return 1
    if check:
        print(f"{len(artifacts)} generated files are up to date")
    return 0
