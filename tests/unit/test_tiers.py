"""The test layout: every test file sits in a tier folder, and what ships or generates the
shipped files imports no test code and no scenario generator."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import TESTS, TIER_OF_FOLDER, tier_folder

ROOT = TESTS.parent


def is_test_side(module: str) -> bool:
    """The tests and their helpers (any ``tests`` package), or the scenario generators."""
    return "tests" in module.split(".") or module.startswith("alerts.scenarios")


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules a file imports (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


def test_every_test_file_is_in_a_tier_folder() -> None:
    stray = [p for p in TESTS.rglob("test_*.py") if tier_folder(p) is None
             and "fixtures" not in p.relative_to(TESTS).parts]
    assert stray == [], f"move into tests/{{{','.join(TIER_OF_FOLDER)}}}/: {stray}"


def test_production_code_imports_no_test_code() -> None:
    production = [*(ROOT / "exporter").rglob("*.py"), *(ROOT / "dashboards").rglob("*.py"),
                  *(p for p in (ROOT / "alerts").rglob("*.py")
                    if "scenarios" not in p.relative_to(ROOT / "alerts").parts)]
    assert production
    bad = {str(p.relative_to(ROOT)): sorted(filter(is_test_side, imported_modules(p)))
           for p in production}
    assert {f: ms for f, ms in bad.items() if ms} == {}
