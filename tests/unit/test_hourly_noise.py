"""The hour's noise (HOURLY_NOISE, the unit of the page's noise band) on both edge
semantics: a window that holds a sample on both edges (promtool, a Prometheus 2 window
aligned with the figure's own evaluations) and one that holds one sample less (Prometheus
3's left-open windows, and every real Prometheus, whose groups are offset within their
interval; emulated by every range 1 ms shorter). A steep noisy climb keeps its noise on
both, and a steady climb has none on either."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from alerts import yamlout
from alerts.generate import rules_yaml
from alerts.promtool_series import series, whole, workload
from alerts.promtool_tests import group_order
from alerts.scenarios.evaluate import shortened
from exporter import catalog as c
from exporter import promql as q
from exporter.promql import HOUR, MINUTE, MiB

PROMTOOL = shutil.which("promtool")
GiB = 1024 * MiB
CLIMB = 2 * GiB / HOUR  # a steep hour: 2 GiB an hour, 3 % of the limit
WOBBLE = 64 * MiB  # every other sample 64 MiB above the line, the rest below: sd 64 MiB


def _figure(noise: float, n: int) -> str:
    return " ".join(str(whole(20 * GiB + CLIMB * i * MINUTE + (noise if i % 2 else -noise)))
                    for i in range(n))


def _test_file(rules: Path) -> dict[str, object]:
    n = 2 * HOUR // MINUTE + 1
    count = "count(%s{pod=\"%s\"} %s)"
    return {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "group_eval_order": group_order(),
        "tests": [{
            "interval": "1m",
            "input_series": [
                series("up", f"1x{n}"),
                *(series(c.MEMORY_LIMIT_BYTES.name, f"{64 * GiB}x{n}", **workload(pod))
                  for pod in ("noisy", "steady")),
                series(c.MEMORY_UNRECLAIMABLE_BYTES.name, _figure(WOBBLE, n),
                       **workload("noisy")),
                series(c.MEMORY_UNRECLAIMABLE_BYTES.name, _figure(0, n), **workload("steady")),
            ],
            "promql_expr_test": [
                # Four deviations of 64 MiB, within the slope's estimate.
                {"expr": count % (q.HOURLY_NOISE, "noisy",
                                  f"> {whole(3.6 * WOBBLE)} < {whole(4.4 * WOBBLE)}"),
                 "eval_time": "2h", "exp_samples": [{"labels": "{}", "value": 1}]},
                {"expr": count % (q.HOURLY_NOISE, "steady", f"< {MiB}"),
                 "eval_time": "2h", "exp_samples": [{"labels": "{}", "value": 1}]},
            ],
        }],
    }


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
@pytest.mark.prometheus
@pytest.mark.parametrize("edges", ["both", "left-open"])
def test_a_steep_noisy_hour_keeps_its_noise_on_either_edge_semantics(
        edges: str, tmp_path: Path) -> None:
    assert PROMTOOL is not None
    text = rules_yaml()
    rules = tmp_path / "headroom.rules.yaml"
    rules.write_text(text if edges == "both" else shortened(text))
    test = tmp_path / "noise.test.yaml"
    test.write_text(yamlout.dump(_test_file(rules)))
    out = subprocess.run([PROMTOOL, "test", "rules", str(test)], capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
