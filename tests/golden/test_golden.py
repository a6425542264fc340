"""Tier 2: fixture host trees -> full exposition, compared with committed golden files.

Regenerate with ``pytest tests/golden/test_golden.py --update-golden`` and review the diff.
"""

from __future__ import annotations

import math
import shutil
import subprocess

import pytest

from tests.conftest import (
    GOLDEN,
    exposition,
    fixture_pipeline,
    host_config,
    parse_exposition,
    recorded_pods,
)

CASES = {
    "v1-cgroupfs-containerd": False,  # no API: pods labelled by UID
    "v2-systemd-mixed": True,  # names resolved
    "v2-kind-nopsi": False,
}


@pytest.mark.parametrize("host", sorted(CASES))
async def test_golden_exposition(host: str, update_golden: bool, make_pipeline: list) -> None:
    pipeline = fixture_pipeline(host_config(host), recorded_pods() if CASES[host] else None)
    make_pipeline.append(pipeline)
    text = await exposition(pipeline)
    golden = GOLDEN / f"{host}.prom"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text(), f"exposition differs from {golden}; --update-golden"


@pytest.mark.parametrize("host", sorted(CASES))
def test_golden_passes_promtool(host: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (the README's test command installs it)")
    body = (GOLDEN / f"{host}.prom").read_bytes()
    res = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True)
    # promtool exits 0 when only lint hints exist; any hint is a defect here too.
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout.decode().strip() == "" and res.stderr.decode().strip() == "", (
        res.stdout.decode() + res.stderr.decode()
    )


def test_kinds_sum_to_usage_in_every_golden() -> None:
    for host in CASES:
        values = parse_exposition((GOLDEN / f"{host}.prom").read_text())
        usage = {k.split("{")[1]: v for k, v in values.items()
                 if k.startswith("headroom_memory_usage_bytes{")}
        assert usage
        for labels, u in usage.items():
            total = sum(v for k, v in values.items()
                        if k.startswith("headroom_memory_bytes{")
                        and _strip_kind(k.split("{")[1]) == labels)
            assert total == u, (host, labels)


def _strip_kind(labels: str) -> str:
    return ",".join(p for p in labels.rstrip("}").split(",") if not p.startswith("kind=")) + "}"


def _families(parse: object, text: str) -> dict[str, list[tuple[str, tuple, float]]]:
    out: dict[str, list[tuple[str, tuple, float]]] = {}
    for fam in parse(text):  # type: ignore[operator]
        out[fam.name] = sorted(
            (s.name, tuple(sorted(s.labels.items())), s.value) for s in fam.samples
        )
    return out


@pytest.mark.parametrize("host", sorted(CASES))
async def test_text_and_openmetrics_parse_back_to_the_same_samples(
        host: str, make_pipeline: list) -> None:
    """Our encoder is checked by client_python's own parsers, for both formats."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from prometheus_client.parser import text_string_to_metric_families as prom

    from exporter.exposition.encode import encode
    from exporter.exposition.render import render

    pipeline = fixture_pipeline(host_config(host), recorded_pods() if CASES[host] else None)
    make_pipeline.append(pipeline)
    families = render(await pipeline.snapshot())
    text, ctype = encode(families, None)
    omtext, omtype = encode(families, "application/openmetrics-text; version=1.0.0")
    assert ctype.startswith("text/plain") and omtype.startswith("application/openmetrics")
    a = _families(prom, text.decode())
    b = _families(om, omtext.decode())
    assert a == b
    assert sum(len(v) for v in a.values()) == text.decode().count("\n") - 2 * len(a)


def test_label_and_help_escaping_round_trip() -> None:
    from prometheus_client.parser import text_string_to_metric_families as prom

    from exporter.catalog import MetricSpec
    from exporter.exposition.encode import Family, encode_families

    spec = MetricSpec("headroom_test_bytes", "gauge", ("a", "b"), "help \\ and\nnewline")
    fam = Family(spec)
    fam.add(['quote " back \\ nl \n', ""], 1.5e12)
    fam.add(["x", "y"], float("nan"))
    fam.add(["x", "z"], float("inf"))
    fam.add(["y", "z"], 0.25)
    (parsed,) = prom(encode_families([fam]).decode())
    assert parsed.documentation == spec.help
    assert parsed.samples[0].labels == {"a": 'quote " back \\ nl \n', "b": ""}
    assert parsed.samples[0].value == 1.5e12
    assert math.isnan(parsed.samples[1].value) and parsed.samples[2].value == math.inf
    assert parsed.samples[3].value == 0.25
