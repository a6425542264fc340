"""The dashboards are functions of the rules' config: each ``*.dashboard.py`` defines
``dashboard(config)``, drawing for one config leaves no trace in the next drawing, and
``headroom generate`` says which extra to install when grafanalib is missing."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dashboards import generate
from dashboards.names import CONFIG

ROOT = Path(__file__).resolve().parents[2]
SCALED = CONFIG.scaled(360).replace(hold_s=60)


def committed() -> dict[str, object]:
    return {p.name.removesuffix(".json"): json.loads(p.read_text())
            for p in sorted((ROOT / "dashboards").glob("*.json"))}


def test_every_source_is_a_function_of_the_config() -> None:
    sources = generate.sources()
    assert [p.name for p in sources] == [f"{name}.dashboard.py" for name in committed()]
    for path in sources:
        tree = ast.parse(path.read_text())
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "dashboard" in functions, path.name
        assert [a.arg for a in functions["dashboard"].args.args] == ["config"], path.name
        assigned = {t.id for n in tree.body if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
        assert "dashboard" not in assigned, f"{path.name}: a module-level dashboard object"


def test_drawing_for_another_config_leaves_the_shipped_drawing_alone() -> None:
    scaled = generate.dashboards(SCALED)
    assert scaled != generate.dashboards(), "the config does not reach the dashboards"
    assert generate.dashboards() == committed()
    assert generate.dashboards(SCALED) == scaled


def test_a_runbook_base_reaches_every_runbook_link() -> None:
    base = "https://runbooks.example/headroom"
    drawn = json.dumps(generate.dashboards(CONFIG.replace(runbook_url_base=base)))
    assert CONFIG.runbook_url_base not in drawn
    assert f"{base}/" in drawn


def test_no_dashboard_module_reloads_or_imports_a_private_module() -> None:
    for path in sorted((ROOT / "dashboards").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("grafanalib"):
                    assert not any(part.startswith("_") for part in name.split(".")), (
                        f"{path.name} imports {name}")
        assert "reload(" not in path.read_text(), path.name


def test_generate_without_grafanalib_names_the_extra() -> None:
    """The exporter's wheel leaves grafanalib to the ``generate`` extra: without it,
    ``headroom generate`` fails with one line that says what to install, exit 2."""
    code = ("import sys; sys.modules['grafanalib'] = None\n"
            "from exporter.cli import main\n"
            "sys.exit(main(['generate', '--check']))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "pip install 'vllm-headroom[generate]'" in lines[0]
    assert "Traceback" not in res.stderr


def test_the_exporter_wheel_does_not_depend_on_grafanalib() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any("grafanalib" in d for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert any(d.startswith("grafanalib") for d in extras["generate"])
    assert "vllm-headroom[generate]" in extras["test"]


def test_the_image_installs_the_wheel_without_extras() -> None:
    """The image's pip installs the bare wheel: no extra, so no grafanalib in the image."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    wheels = re.findall(r"/wheels/vllm_headroom-\*\.whl(\S*)", dockerfile)
    assert wheels == [""], wheels
