"""The README's layout table is the architecture, read from the imports.

The table (README "Layout") names each part, what it holds and which parts it may
import. Every import in ``exporter/``, ``alerts/`` and ``dashboards/`` (lazy ones and
``TYPE_CHECKING`` ones included) must be one its part may make; every module of
``exporter/`` must sit in a part; ``exporter/`` imports nothing of ``alerts/``,
``dashboards/``, ``tests/`` or grafanalib (the image ships none of them); and no two
modules or classes of ``exporter/`` share a name.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- parts: read by tests/unit/test_layering.py -->"
CHECKED = ("exporter", "alerts", "dashboards")  # the folders whose imports are read
# What exporter/ never imports: the generators, the tests, the dashboards' library.
NEVER_IN_EXPORTER = ("alerts", "dashboards", "tests", "grafanalib")


@dataclass(frozen=True)
class Part:
    name: str
    holds: tuple[str, ...]  # module names; a part holds them and everything beneath
    may: frozenset[str]


def _holds(entry: str) -> str:
    """A "holds" entry (relative to exporter/, ``../`` for another folder) -> a module."""
    top = "exporter"
    while entry.startswith("../"):
        top, entry = "", entry[3:]
    entry = entry.removesuffix("/").removesuffix(".py").removesuffix("__init__")
    dotted = entry.strip("/").replace("/", ".")
    return ".".join(x for x in (top, dotted) if x)


def parse_table(readme: str) -> list[Part]:
    """The parts, in the table's order (``all above`` means the rows before)."""
    after = readme.split(MARK, 1)
    if len(after) != 2:
        raise ValueError(f"README has no layout table after {MARK}")
    block = after[1].split("```", 2)[1]
    rows = [r for r in block.splitlines()[1:] if r.strip()]  # [0]: the fence's language
    parts: list[Part] = []
    for row in rows[1:]:  # rows[0]: the header
        cols = re.split(r"\s{2,}", row.strip())
        if len(cols) != 3:
            raise ValueError(f"layout row needs part, holds, may import: {row!r}")
        name, holds, may = cols
        above = {p.name for p in parts}
        if may == "nothing":
            allowed: set[str] = set()
        elif may.startswith("all above"):
            allowed = above - set(may.removeprefix("all above").removeprefix(" but").split())
        else:
            allowed = set(may.split())
        parts.append(Part(name, tuple(_holds(h) for h in holds.split()), frozenset(allowed)))
    return parts


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def part_of(module: str, parts: list[Part]) -> Part | None:
    """The part holding a module: the longest "holds" entry that is it or above it."""
    best: tuple[int, Part] | None = None
    for part in parts:
        for h in part.holds:
            # the package itself (exporter/__init__.py) holds only itself
            beneath = module == h or (h != "exporter" and module.startswith(h + "."))
            if beneath and (best is None or len(h) > best[0]):
                best = (len(h), part)
    return best[1] if best else None


def python_files(root: Path, folder: str) -> list[Path]:
    return sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)


def imports(path: Path, root: Path, modules: set[str]) -> list[tuple[int, str]]:
    """(line, module imported) for every import of the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.append((node.lineno, sub if sub in modules else base))
    return sorted(set(found))


def violations(root: Path, parts: list[Part]) -> list[str]:
    """Each import a part may not make, as ``file:line: what``."""
    files = [f for folder in CHECKED for f in python_files(root, folder)]
    modules = {module_name(f, root) for f in files}
    bad: list[str] = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        own = part_of(module_name(f, root), parts)
        for line, target in imports(f, root, modules):
            top = target.partition(".")[0]
            if rel.startswith("exporter/") and top in NEVER_IN_EXPORTER:
                bad.append(f"{rel}:{line}: exporter/ never imports {target}")
                continue
            if top != "exporter" or own is None:
                continue
            dest = part_of(target, parts)
            if dest is None:
                bad.append(f"{rel}:{line}: imports {target}, which is in no part")
            elif dest is not own and dest.name not in own.may:
                bad.append(f"{rel}:{line}: {own.name} may not import {target} ({dest.name})")
    return bad


def unplaced(root: Path, parts: list[Part]) -> list[str]:
    return [f.relative_to(root).as_posix() for f in python_files(root, "exporter")
            if part_of(module_name(f, root), parts) is None]


def twins(root: Path) -> list[str]:
    """Module and package names, and top-level class names, that two places of exporter/
    share."""
    seen: dict[str, list[str]] = defaultdict(list)
    for f in python_files(root, "exporter"):
        rel = f.relative_to(root).as_posix()
        if f.name not in ("__init__.py", "__main__.py"):
            seen[f"module {f.stem}"].append(rel)
        elif f.name == "__init__.py" and f.parent != root / "exporter":
            seen[f"module {f.parent.name}"].append(f.parent.relative_to(root).as_posix() + "/")
        for node in ast.parse(f.read_text()).body:
            if isinstance(node, ast.ClassDef):
                seen[f"class {node.name}"].append(rel)
    return [f"{name}: {', '.join(where)}" for name, where in sorted(seen.items())
            if len(where) > 1]


@pytest.fixture(scope="module")
def parts() -> list[Part]:
    return parse_table((ROOT / "README.md").read_text())


def test_every_import_is_one_the_layout_allows(parts: list[Part]) -> None:
    bad = violations(ROOT, parts)
    assert not bad, "imports the README's layout table does not allow:\n" + "\n".join(bad)


def test_every_module_of_the_exporter_is_in_a_part(parts: list[Part]) -> None:
    missing = unplaced(ROOT, parts)
    assert not missing, ("modules in no part of the README's layout table (add them to "
                         "a part's folder, or the table):\n" + "\n".join(missing))


def test_no_two_modules_or_classes_share_a_name() -> None:
    found = twins(ROOT)
    assert not found, "twin names in exporter/:\n" + "\n".join(found)


def test_the_table_names_only_parts_and_places_that_exist(parts: list[Part]) -> None:
    names = {p.name for p in parts}
    assert len(names) == len(parts), "a part is listed twice"
    for part in parts:
        assert part.may <= names, f"{part.name} may import unknown parts {part.may - names}"
        for module in part.holds:
            path = ROOT.joinpath(*module.split("."))
            assert path.with_suffix(".py").is_file() or path.is_dir(), (
                f"{part.name} holds {module}, which does not exist")


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_checker_names_each_breach_by_file_and_line(parts: list[Part],
                                                        tmp_path: Path) -> None:
    """A source importing the join, a lazy grafanalib import, on-call reaching into the
    exporter, a dashboard reaching past the catalogue, a module in no part and twin
    names: each is reported where it is."""
    root = _tree(tmp_path, {
        "exporter/__init__.py": "",
        "exporter/catalog.py": "",
        "exporter/collectors/__init__.py": "",
        "exporter/collectors/probe.py": ("from exporter import catalog\n"
                                         "from exporter.exposition.join import Snapshot\n"),
        "exporter/exposition/__init__.py": "",
        "exporter/exposition/join.py": "class Snapshot: ...\n",
        "exporter/oncall/__init__.py": "",
        "exporter/oncall/peek.py": ("def f() -> None:\n"
                                    "    import grafanalib\n"
                                    "    from exporter.collectors import probe\n"),
        "exporter/stray.py": "class Snapshot: ...\n",
        "exporter/oncall/join.py": "",
        "dashboards/x.py": "from exporter.exposition import join\n",
    })
    assert violations(root, parts) == [
        "exporter/collectors/probe.py:2: collectors may not import "
        "exporter.exposition.join (exposition)",
        "exporter/oncall/peek.py:2: exporter/ never imports grafanalib",
        "exporter/oncall/peek.py:3: oncall may not import exporter.collectors.probe "
        "(collectors)",
        "dashboards/x.py:1: dashboards may not import exporter.exposition.join (exposition)",
    ]
    assert unplaced(root, parts) == ["exporter/stray.py"]
    assert twins(root) == [
        "class Snapshot: exporter/exposition/join.py, exporter/stray.py",
        "module join: exporter/exposition/join.py, exporter/oncall/join.py",
    ]


def test_the_table_reads_all_above_and_exceptions() -> None:
    readme = f"""{MARK}
```text
part   holds        may import
a      a.py         nothing
b      b/           all above
c      c/           all above but a
d      ../d/        b
```
"""
    got = {p.name: (p.holds, set(p.may)) for p in parse_table(readme)}
    assert got == {"a": (("exporter.a",), set()), "b": (("exporter.b",), {"a"}),
                   "c": (("exporter.c",), {"b"}), "d": (("d",), {"b"})}
