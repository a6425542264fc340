"""The dashboards' OOM count on cgroup v1 and v2, evaluated by Prometheus's engine.

This machine's kernel is cgroup v1 (``test_dashboards_e2e`` kills a real process there);
v2's case, where the pod cgroup's ``oom_kill`` is hierarchical and a container's counter
counts too, is replayed here with ``promtool test rules``: one table row per history of
the three sources (pod cgroup, containers, headroom's watcher). The count must be the
number of kills, whatever the cgroup version, restarts or sources that saw it: not 0 on
v1 (the pod level never counts there), not 2 for one kill on v2 (pod level and
container both count it), and a whole number (increase() extrapolates).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dashboards import oom

pytestmark = pytest.mark.prometheus

POD = 'job="headroom", namespace="ns", pod="p"'
EVENTS = "headroom_memory_events_total"
WATCHER = "headroom_oom_kills_total"
# One sample a minute, 0m..10m; "_" is no sample (the series does not exist then).
CASES: dict[str, tuple[dict[str, str], int]] = {
    "v1: only the victim's container counts": ({
        f'{EVENTS}{{{POD}, container="", event="oom_kill"}}': "0 0 0 0 0 0 0 0 0 0 0",
        f'{EVENTS}{{{POD}, container="c1", event="oom_kill"}}': "0 0 0 0 1 1 1 1 1 1 1",
        f'{WATCHER}{{{POD}, container="", process="EngineCore"}}': "_ _ _ _ 1 1 1 1 1 1 1",
    }, 1),
    "v2: pod level and container both count one kill": ({
        f'{EVENTS}{{{POD}, container="", event="oom_kill"}}': "0 0 0 0 1 1 1 1 1 1 1",
        f'{EVENTS}{{{POD}, container="c1", event="oom_kill"}}': "0 0 0 0 1 1 1 1 1 1 1",
        f'{WATCHER}{{{POD}, container="", process="EngineCore"}}': "_ _ _ _ 1 1 1 1 1 1 1",
    }, 1),
    "v2: the killed container restarted (new cgroup, old one gone)": ({
        f'{EVENTS}{{{POD}, container="", event="oom_kill"}}': "0 0 0 1 1 1 1 1 1 1 1",
        f'{EVENTS}{{{POD}, container="c1", event="oom_kill"}}': "0 0 0 1 _ _ _ _ _ _ _",
        f'{EVENTS}{{{POD}, container="c2", event="oom_kill"}}': "_ _ _ _ _ 0 0 0 0 0 0",
    }, 1),
    "v1: the killed container restarted": ({
        f'{EVENTS}{{{POD}, container="", event="oom_kill"}}': "0 0 0 0 0 0 0 0 0 0 0",
        f'{EVENTS}{{{POD}, container="c1", event="oom_kill"}}': "0 0 0 1 _ _ _ _ _ _ _",
        f'{EVENTS}{{{POD}, container="c2", event="oom_kill"}}': "_ _ _ _ _ 0 0 0 0 0 0",
    }, 1),
    "v2: two containers killed": ({
        f'{EVENTS}{{{POD}, container="", event="oom_kill"}}': "0 0 1 1 1 1 2 2 2 2 2",
        f'{EVENTS}{{{POD}, container="c1", event="oom_kill"}}': "0 0 1 1 1 1 1 1 1 1 1",
        f'{EVENTS}{{{POD}, container="c2", event="oom_kill"}}': "0 0 0 0 0 0 1 1 1 1 1",
    }, 2),
    "the watcher alone (a process name seen killed before)": ({
        f'{EVENTS}{{{POD}, container="c1", event="oom_kill"}}': "0 0 0 0 0 0 0 0 0 0 0",
        f'{WATCHER}{{{POD}, container="", process="EngineCore"}}': "1 1 1 1 1 2 2 2 2 2 2",
    }, 1),
    "no kill": ({
        f'{EVENTS}{{{POD}, container="", event="oom_kill"}}': "0 0 0 0 0 0 0 0 0 0 0",
        f'{EVENTS}{{{POD}, container="c1", event="oom_kill"}}': "0 0 0 0 0 0 0 0 0 0 0",
    }, 0),
}


def count_expr() -> str:
    """The dashboards' per-pod OOM count (``oom.oom_kills``) over the 10 minutes, with
    the job variable bound as Grafana would."""
    expr = oom.oom_kills("10m", 'namespace="ns"', 'pod="p"')
    return f"sum({expr})".replace("$job", "headroom")


def test_the_naive_pod_level_count_reads_zero_on_v1(tmp_path: Path) -> None:
    """The check can fail: the pod-level counter alone (what the dashboards used to
    read) gives 0 for the v1 kill."""
    series, _ = CASES["v1: only the victim's container counts"]
    naive = (f'sum(increase({EVENTS}{{{POD}, container="", event="oom_kill"}}[10m]))')
    ok, out = promtool(tmp_path, [(series, naive, 0)])
    assert ok, out
    ok, _ = promtool(tmp_path, [(series, naive, 1)])
    assert not ok


@pytest.mark.parametrize("case", list(CASES))
def test_oom_count_on_v1_and_v2(tmp_path: Path, case: str) -> None:
    series, kills = CASES[case]
    ok, out = promtool(tmp_path, [(series, count_expr(), kills)])
    assert ok, f"{case}: expected {kills}\n{out}"


def promtool(tmp_path: Path, tests: list[tuple[dict[str, str], str, int]]) -> tuple[bool, str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool not installed (scripts/test.sh installs it)")
    (tmp_path / "empty.rules.yaml").write_text("groups: []\n")
    doc = {
        "rule_files": ["empty.rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": [
                    {"expr": expr, "eval_time": "10m",
                     "exp_samples": [{"labels": "{}", "value": kills}]},
                ],
            }
            for series, expr, kills in tests
        ],
    }
    path = tmp_path / "oom.test.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = subprocess.run([binary, "test", "rules", str(path)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    return proc.returncode == 0, proc.stdout + proc.stderr
