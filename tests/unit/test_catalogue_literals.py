"""No rule, panel or on-call module types a label value the catalogue owns.

``exporter.catalog`` names the values its labels take (memory kinds, events, media,
states, ...), ``exporter.promql`` the kinds the rules derive, and the registry the
collectors. Code that selects on them imports those names: a value renamed in the
exporter must break the rules and panels at import, not leave them silently empty.

The scan reads each module's syntax tree, so comments and docstrings never count. It
reports, as ``file:line``:

* a string equal to a distinctive owned value (``"rss_anon"``, ``"oom_kill"``), or an
  alternation of owned values (``"anon|shmem"``, a regex in the making);
* a PromQL fragment in a string that types one: ``kind="anon"``, ``kind=~"anon|shmem"``,
  ``label_replace(..., "kind", "kernel", ...)``;
* a keyword argument or dict entry named after an owned label with an owned literal
  value: ``series(m, event="max")``, ``{"medium": "cpu"}``.

Values that are ordinary words elsewhere (``max`` is an aggregation, ``cpu`` a panel
title, ``hidden`` a legend mode, collector names are everywhere) count only in the last
two forms, where the label names them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter import promql
from exporter.assembly import registry

ROOT = Path(__file__).resolve().parents[2]

# label -> the values the catalogue (or the PromQL catalogue, or the registry) owns
OWNED: dict[str, frozenset[str]] = {
    "kind": frozenset((*c.MEMORY_KINDS, *c.PROCESS_MEMORY_KINDS, *c.PSS_KINDS,
                       *promql.KINDS)),
    "event": frozenset(c.MEMORY_EVENTS),
    "level": frozenset(c.PRESSURE_LEVELS),
    "medium": frozenset(c.KV_MEDIA),
    "reason": frozenset(c.KV_EVENTS_LOST_REASONS),
    "state": frozenset(c.REQUEST_STATES),
    "process": frozenset((c.OTHER_PROCESS,)),
    "collector": frozenset(s.name for s in registry.SOURCES),
}
# Owned values that are also ordinary words, aggregations or Grafana settings: counted
# only where an owned label names them.
COMMON_WORDS = frozenset({
    "low", "high", "max", "oom", "some", "full", "file", "swap", "gpu", "cpu", "hidden",
    "gap", "overflow", "garbage", "disconnect", "running", "waiting", "swapped", "other",
    *OWNED["collector"],
})
ALL_OWNED = frozenset().union(*OWNED.values())
DISTINCTIVE = ALL_OWNED - COMMON_WORDS

_LABELS = "|".join(sorted(OWNED))
# kind="anon", kind=~"anon|shmem", kind!="x", also with the quotes escaped (\"anon\")
# inside a string that is itself PromQL inside a Go template.
_MATCHER = re.compile(rf'\b({_LABELS})\s*(?:=~|!~|!=|=)\s*\\*"([^"\\]*)\\*"')
# "kind", "kernel", ... : a label and its value as consecutive string arguments
# (label_replace).
_LABEL_ARG = re.compile(rf'\\*"({_LABELS})\\*"\s*,\s*\\*"([^"\\]*)\\*"')


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def _typed_value(text: str) -> bool:
    """A distinctive owned value, or an alternation of owned values with one in it."""
    parts = set(text.split("|"))
    return bool(parts & DISTINCTIVE) and parts <= ALL_OWNED


def _owned_in(label: str, value: str) -> bool:
    return any(v in OWNED[label] for v in value.split("|"))


def _fragments(text: str) -> Iterator[str]:
    for pattern in (_MATCHER, _LABEL_ARG):
        for m in pattern.finditer(text):
            if _owned_in(m.group(1), m.group(2)):
                yield m.group(0)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or bare string statements."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def _string_parts(node: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Each string literal, an f-string as its literal parts joined (a placeholder
    between them breaks a fragment)."""
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) and isinstance(v.value, str)
                 else "\0" for v in node.values]
        yield node, "".join(parts)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node, node.value


def _labelled(node: ast.AST) -> Iterator[tuple[ast.AST, str, str]]:
    """(node, label, literal) for ``label="literal"`` keywords and dict entries."""
    if isinstance(node, ast.Call):
        for kw in node.keywords:
            if kw.arg in OWNED and isinstance(kw.value, ast.Constant) \
                    and isinstance(kw.value.value, str):
                yield kw.value, kw.arg, kw.value.value
    elif isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=True):
            if isinstance(k, ast.Constant) and k.value in OWNED \
                    and isinstance(v, ast.Constant) and isinstance(v.value, str):
                yield v, str(k.value), v.value


def scan(source: str, path: str) -> list[Hit]:
    tree = ast.parse(source)
    skip = _docstrings(tree)
    inner = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
             for v in node.values}
    hits: list[Hit] = []
    for node in ast.walk(tree):
        for lit, label, value in _labelled(node):
            if _owned_in(label, value):
                hits.append(Hit(path, getattr(lit, "lineno", 0), f'{label}="{value}"'))
        if id(node) in skip or id(node) in inner:
            continue
        for lit, text in _string_parts(node):
            line = getattr(lit, "lineno", 0)
            if _typed_value(text):
                hits.append(Hit(path, line, repr(text)))
            hits += [Hit(path, line, f) for f in _fragments(text)]
    return sorted(set(hits), key=lambda h: (h.line, h.text))


def _modules(folder: str, exclude: str | None = None) -> list[Path]:
    if "*" in folder:  # a few modules of a package, by name
        return sorted(ROOT.glob(folder))
    base = ROOT / folder
    return sorted(p for p in base.rglob("*.py")
                  if exclude is None or not p.is_relative_to(base / exclude))


AREAS: dict[str, tuple[str, str | None]] = {
    "alerts": ("alerts", "scenarios"),  # test inputs, not rules
    "dashboards": ("dashboards", None),
    "oncall": ("exporter/oncall", None),
    "postmortem page": ("exporter/postmortem/page*.py", None),  # the on-call's page
}


def area_hits(area: str) -> list[Hit]:
    folder, exclude = AREAS[area]
    modules = _modules(folder, exclude)
    assert modules, f"{area}: no module at {folder}"
    return [h for p in modules for h in scan(p.read_text(), str(p.relative_to(ROOT)))]


@pytest.mark.parametrize("area", sorted(AREAS))
def test_no_typed_catalogue_label_values(area: str) -> None:
    hits = area_hits(area)
    assert not hits, (
        f"{len(hits)} label value(s) the catalogue owns, typed as literals (import them "
        "from exporter.catalog / exporter.promql):\n" + "\n".join(map(str, hits)))


@pytest.mark.parametrize("snippet, found", [
    ('x = "rss_anon"', ["'rss_anon'"]),
    ("q = 'm{kind=\"anon\"}'", ['kind="anon"']),
    ("q = 'm{kind=~\"file|shmem\"}'", ['kind=~"file|shmem"']),
    ("q = f'm{{kind=~\"{k}\"}}'", []),
    ('q = \'label_replace(x, "kind", "kernel", "", "")\'', ['"kind", "kernel"']),
    ('series(m, event="max")', ['event="max"']),
    ('d = {"medium": "cpu"}', ['medium="cpu"']),
    ('kinds("anon|shmem")', ["'anon|shmem'"]),
    ('x = "max"', []),
    ('x = "max|min"', []),
    ('q = \'m{container=""}\'', []),
    ('def f():\n    """kind="anon" and rss_anon in prose."""\n', []),
    ('x = 1  # kind="anon"', []),
])
def test_the_scan_finds_typed_values_and_only_those(snippet: str, found: list[str]) -> None:
    assert [h.text for h in scan(snippet, "x.py")] == found
