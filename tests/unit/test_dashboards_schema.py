"""The dashboards type-check against Grafana's current model: ``@grafana/schema`` (npm)
with TypeScript ``tsc --strict`` (scripts/dashboard_types.py; installed under
.cache/grafana-schema by scripts/install-grafana-schema.sh). The grafana-foundation-sdk
round trip (tests/unit/test_dashboards_model.py) checks the 11.6 model beside it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dashboards import generate
from scripts import dashboard_types as dt

if not dt.TSC.exists():
    if os.environ.get("HEADROOM_REQUIRE_ONCALL_TOOLS") == "1":
        pytest.fail("@grafana/schema not installed: bash scripts/install-grafana-schema.sh",
                    pytrace=False)
    pytest.skip("@grafana/schema not installed (scripts/install-grafana-schema.sh)",
                allow_module_level=True)


def write(tmp: Path, models: dict[str, dict[str, Any]]) -> list[Path]:
    paths = []
    for name, doc in models.items():
        p = tmp / f"{name}.json"
        p.write_text(json.dumps(doc))
        paths.append(p)
    return paths


def test_every_dashboard_type_checks_with_no_error(tmp_path: Path) -> None:
    errors = dt.check(write(tmp_path, generate.dashboards()))
    assert errors == [], "\n".join(errors)


def test_the_check_finds_what_the_current_model_removed(tmp_path: Path) -> None:
    """Keys the current model removed and an older model accepted: a top-level
    annotation ``expr`` and a table ``footer``."""
    models = generate.dashboards()
    pod, fleet = models["headroom-pod"], models["headroom-fleet"]
    a = pod["annotations"]["list"][0]
    a["expr"] = a.pop("target")["expr"]
    table = next(p for p in fleet["panels"] if p["type"] == "table")
    table["options"]["footer"] = {"show": False, "reducer": ["sum"], "countRows": False}
    stat = next(p for p in pod["panels"] if p["type"] == "stat")
    stat["options"]["colorMode"] = "rainbow"  # not a value of BigValueColorMode
    errors = dt.check(write(tmp_path, {"headroom-pod": pod, "headroom-fleet": fleet}))
    text = "\n".join(errors)
    assert "'\"expr\"' does not exist in type 'AnnotationQuery<PromQuery>'" in text, text
    assert "'\"footer\"' does not exist in type 'Options'" in text, text
    assert '"rainbow"' in text, text
    assert len(errors) == 3, text


def test_enums_become_unions_of_their_values() -> None:
    src = 'export declare enum Mode {\n    A = "absolute",\n    P = "percentage"\n}'
    out = dt.unions(src)
    assert 'export type Mode = "absolute" | "percentage";' in out
    assert 'type A = "absolute";' in out
