"""promtool checks of the generated rules, and of the pieces that generate them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alerts import generate, rules
from alerts.scenarios import first_wave
from alerts.scenarios.series import render
from exporter import catalog, promql
from exporter.promql import CONFIG as DEFAULT
from exporter.promql import DAY, HOUR, Config
from exporter.promql import duration as promql_duration

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
TEST_FILES = sorted((ALERTS / "promtool").glob("*.test.yaml"))


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=900,
                          check=False)


def test_generated_files_are_fresh() -> None:
    stale = [rel for rel, text in generate.artifacts().items()
             if not (ROOT / rel).exists() or (ROOT / rel).read_text() != text]
    assert not stale, f"run `headroom generate`: stale {stale}"


def _exprs(text: str) -> list[tuple[str, str]]:
    doc = yaml.safe_load(text)
    return [(r.get("record") or r["alert"], r["expr"])
            for g in doc["groups"] for r in g["rules"]]


@pytest.mark.parametrize("factor", [1, 360, 720])
def test_every_generated_expression_parses(factor: int) -> None:
    """A PromQL parser (promql-parser, the Rust one) reads every expression, so a
    broken template fails here, without promtool."""
    promql_parser = pytest.importorskip("promql_parser")
    cfg = DEFAULT if factor == 1 else DEFAULT.scaled(factor)
    exprs = _exprs(generate.rules_yaml(cfg))
    # GROWTH is recorded by one rule per horizon, PATTERN_PEAK by one per window ahead,
    # PATTERN_SIGN by one per sign (release, quiet); FillingUp has two severities.
    assert len(exprs) == len(promql.RECORDING_RULES) + len(promql.HORIZONS) - 1 \
        + len(rules.pattern_windows_s(cfg)) - 1 + 1 + len(promql.ALERT_NAMES) + 1
    for name, text in exprs:
        try:
            promql_parser.parse(text)
        except ValueError as exc:  # the parser's error names the position
            raise AssertionError(f"{name}: {exc}\n{text}") from exc


def test_the_parser_test_can_fail() -> None:
    promql_parser = pytest.importorskip("promql_parser")
    with pytest.raises(ValueError):
        promql_parser.parse(promql.expr("max by ${g} (x", g="(a)"))


@needs_promtool
@pytest.mark.prometheus
def test_promtool_check_rules() -> None:
    out = _promtool("check", "rules", str(ALERTS / "headroom.rules.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
@pytest.mark.prometheus
def test_scaled_config_rules_are_valid(tmp_path: Path) -> None:
    fast = DEFAULT.scaled(720)
    assert fast.baseline_window_s == 120 and fast.fill_warning_horizon_s == 360
    path = tmp_path / "fast.rules.yaml"
    path.write_text(generate.rules_yaml(fast))
    out = _promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[2m])" in path.read_text() and "offset 2m)" in path.read_text()
    assert f'interval: {promql_duration(fast.lasting_interval_s)}' in path.read_text()


@needs_promtool
@pytest.mark.prometheus
@pytest.mark.parametrize("path", TEST_FILES, ids=[p.name for p in TEST_FILES])
def test_promtool_test_rules(path: Path) -> None:
    out = _promtool("test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_is_tested_and_has_a_runbook() -> None:
    text = (ALERTS / "headroom.rules.yaml").read_text()
    names = re.findall(r"^  - alert: (\w+)$", text, flags=re.M)
    assert sorted(set(names)) == sorted(promql.ALERT_NAMES)
    assert names.count("HeadroomMemoryFillingUp") == 2
    unit = "".join(p.read_text() for p in TEST_FILES if p.name.startswith("unit"))
    for name in promql.ALERT_NAMES:
        assert f'alertname="{name}"' in unit, f"no unit test for {name}"
        page = ALERTS / "runbooks" / f"{name}.md"
        assert page.exists(), page
        assert DEFAULT.runbook_url(name) in text


def test_alerts_carry_the_annotations_and_severities_of_the_design() -> None:
    doc = yaml.safe_load((ALERTS / "headroom.rules.yaml").read_text())
    alerts = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    severities = {(r["alert"], r["labels"]["severity"]) for r in alerts}
    assert ("HeadroomMemoryFillingUp", "warning") in severities
    assert ("HeadroomMemoryFillingUp", "critical") in severities
    assert ("HeadroomMemoryNearLimit", "critical") in severities
    assert ("HeadroomNodeMemoryPressure", "critical") in severities
    assert all(sev == "warning" for a, sev in severities if a not in (
        "HeadroomMemoryFillingUp", "HeadroomMemoryNearLimit", "HeadroomNodeMemoryPressure"))
    for r in alerts:
        assert set(r["annotations"]) == {"summary", "description", "runbook_url"}, r["alert"]
    # A gap must not resolve a page: every alert but the kill report keeps firing.
    assert all("keep_firing_for" in r for r in alerts if r["alert"] != "HeadroomPodOOMKilled")


def test_raw_series_are_selected_by_the_config_selector() -> None:
    cfg = DEFAULT.replace(selector='job="other"')
    text = generate.rules_yaml(cfg)
    body = text[text.index("groups:"):].replace('\\"', '"')  # queries in annotations
    raw = re.findall(r"\b(headroom_[a-z_]+)(\{[^}]*\})?", body)
    assert raw
    for name, matchers in raw:
        assert name in catalog.by_name(), name
        assert matchers.startswith('{job="other"'), (name, matchers)
    assert 'job="headroom"' not in body


def test_recording_rule_names_constant_matches_the_file() -> None:
    text = (ALERTS / "headroom.rules.yaml").read_text()
    found = re.findall(r"^  - record: (\S+)$", text, flags=re.M)
    assert tuple(dict.fromkeys(found)) == tuple(dict.fromkeys(
        [*promql.FAST_RECORDING_RULE_HELP, *promql.LASTING_RECORDING_RULE_HELP,
         *promql.FLOOR_MEMORY_RECORDING_RULE_HELP]))
    assert found.count(promql.GROWTH) == len(promql.HORIZONS)
    assert set(promql.FORECAST_SERIES) <= set(found) | {promql.PEAK_ENVELOPE}
    assert all(n.startswith("headroom:") and n.count(":") == 2 for n in promql.RECORDING_RULES)


def test_config_validation_and_durations() -> None:
    assert promql_duration(DAY) == "1d"
    assert promql_duration(HOUR + 30 * 60) == "1h30m"
    assert DEFAULT.fill_warning_horizon_s == 3 * DAY
    assert DEFAULT.fill_critical_horizon_s == 75 * 60
    with pytest.raises(ValueError):
        DEFAULT.replace(near_limit_ratio=1.5)
    with pytest.raises(ValueError):
        DEFAULT.replace(fill_critical_horizon_s=DAY)
    with pytest.raises(ValueError):
        Config(group_labels=("pod",)).validated()
    with pytest.raises(ValueError):  # hysteresis: the clear level is the looser one
        DEFAULT.replace(fill_warning_clear_horizon_s=DAY)
    with pytest.raises(ValueError):
        DEFAULT.replace(near_limit_clear_ratio=0.97)


def test_scenarios_kill_when_unreclaimable_reaches_the_limit() -> None:
    for s in first_wave.all_scenarios():
        if s.kill_s is None:
            continue
        series = render(s)
        key = next(k for k in series if k.startswith(catalog.MEMORY_UNRECLAIMABLE_BYTES.name)
                   and f'container="{s.kill_container}"' in k)
        limit = next(v for k, v in series.items()
                     if k == key.replace(catalog.MEMORY_UNRECLAIMABLE_BYTES.name,
                                         catalog.MEMORY_LIMIT_BYTES.name))
        values = series[key]
        assert values[-1] is not None and limit[-1] is not None
        assert values[-1] >= limit[-1] > values[-2]  # type: ignore[operator]


def test_night_shm_working_set_stays_flat_while_unreclaimable_grows() -> None:
    s = first_wave.night_shm()
    two_days = [s.containers["vllm"](t) for t in range(0, 2 * DAY, HOUR)]
    ws = [cg.working_set for cg in two_days if cg is not None]
    unrecl = [cg.unreclaimable for cg in two_days if cg is not None]
    assert max(ws) - min(ws) < 1024**2
    assert max(unrecl) - min(unrecl) > 4 * 1024**3


def test_spike_reaches_96_percent_for_two_minutes() -> None:
    s = first_wave.brief_spike()
    ratios = [cg.unreclaimable / cg.limit for t in s.times
              if (cg := s.containers["vllm"](t)) is not None]
    assert sum(r >= 0.96 - 1e-9 for r in ratios) == 2  # two 1-minute samples
    assert max(ratios) < 0.97
