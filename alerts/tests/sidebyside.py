"""Replay every scenario against headroom's rules and against the common rule
(working set / limit > 0.9 for 5m, on headroom's own series), and print how long before
the kill each pages and tickets, and any false page.

Each scenario becomes one promtool unit test (real PromQL, the shipped rules, evaluated
every sample); the test asks for the first time each alert fired and the answer is read
from promtool's report of the (deliberately unmatched) result.

    python -m alerts.sidebyside
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alerts import yamlout
from alerts.generate import rules_yaml
from exporter import catalog as c
from exporter.promql import CONFIG as DEFAULT
from exporter.promql import MINUTE, Config

from . import promtool_tests as pt
from . import scenarios as sc

COMMON_ALERT = "CommonWorkingSetNearLimit"
_GOT = re.compile(r"\{([^{}]*)\} ([-+0-9.eE]+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def common_rules(config: Config = DEFAULT) -> dict[str, Any]:
    """The rule most teams have: kubelet working set over limit, containers only."""
    sel = f'{config.selector}, container!=""'
    by = "(namespace, pod, container)"
    return {"groups": [{"name": "common", "rules": [{
        "alert": COMMON_ALERT,
        "expr": (
            f"max by {by} ({c.MEMORY_WORKING_SET_BYTES.name}{{{sel}}})\n"
            f"  / max by {by} ({c.MEMORY_LIMIT_BYTES.name}{{{sel}}}) > 0.9"
        ),
        "for": "5m",
        "labels": {"severity": "critical"},
    }]}]}


@dataclass(frozen=True)
class Firing:
    alertname: str
    severity: str
    container: str
    first_s: float


def first_firing_expr(s: sc.Scenario) -> str:
    step = f"{s.step_s}s"
    return (
        "min by (alertname, severity, container) (min_over_time("
        f'(time() * ALERTS{{alertstate="firing"}})[{s.end_s}s:{step}]))'
    )


def _test_file(s: sc.Scenario, rules_path: Path, common_path: Path) -> dict[str, Any]:
    return {
        "rule_files": [str(rules_path), str(common_path)],
        "evaluation_interval": f"{s.step_s}s",
        "group_eval_order": [*pt.group_order(), "common"],
        "tests": [{
            "name": s.name,
            "interval": f"{s.step_s}s",
            "input_series": pt.input_series(s),
            # Expect nothing: promtool then prints what it got.
            "promql_expr_test": [{
                "expr": first_firing_expr(s), "eval_time": f"{s.end_s}s", "exp_samples": [],
            }],
        }],
    }


def parse_got(output: str) -> list[Firing]:
    """The samples promtool printed after `got:`."""
    out = []
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith("got:"):
            continue
        for labels, value in _GOT.findall(line):
            lbl = dict(_LABEL.findall(labels))
            out.append(Firing(lbl.get("alertname", ""), lbl.get("severity", ""),
                              lbl.get("container", ""), float(value)))
    return out


def replay(s: sc.Scenario, workdir: Path, promtool: str) -> list[Firing]:
    rules_path = workdir / "headroom.rules.yaml"
    common_path = workdir / "common.rules.yaml"
    test_path = workdir / f"{s.name}.test.yaml"
    test_path.write_text(yamlout.dump(_test_file(s, rules_path, common_path)))
    proc = subprocess.run([promtool, "test", "rules", str(test_path)],
                          capture_output=True, text=True, timeout=600, check=False)
    text = proc.stdout + proc.stderr
    if proc.returncode == 0:
        return []  # nothing fired at all
    if "got:" not in text:
        raise RuntimeError(f"promtool failed on {s.name}:\n{text}")
    return parse_got(text)


def _lead(s: sc.Scenario, first: float | None) -> str:
    if first is None:
        return "-"
    if s.kill_s is None:
        return f"fired at {_hm(first)}"
    return _hm(s.kill_s - first)


def _hm(seconds: float) -> str:
    h, m = divmod(round(seconds / MINUTE), 60)
    return f"{h}h{m:02d}m"


def _first(fs: list[Firing], pred: Any) -> Firing | None:
    matching = sorted((f for f in fs if pred(f)), key=lambda f: f.first_s)
    return matching[0] if matching else None


META = {"HeadroomExporterDown", "HeadroomCollectorFailing", "HeadroomVLLMScrapeFailing"}


def row(s: sc.Scenario, fs: list[Firing]) -> list[str]:
    def ours(f: Firing) -> bool:
        return f.alertname.startswith("Headroom") and f.alertname not in META

    ticket = _first(fs, lambda f: ours(f) and f.severity == "warning")
    page = _first(fs, lambda f: ours(f) and f.severity == "critical")
    common = _first(fs, lambda f: f.alertname == COMMON_ALERT)

    def name(f: Firing | None) -> str:
        if f is None:
            return ""
        where = f.container or "pod"
        return f" {f.alertname.removeprefix('Headroom')}[{where}]"

    def filling(sev: str) -> str:
        f = _first(fs, lambda f: f.alertname == "HeadroomMemoryFillingUp"
                   and f.severity == sev and f.container == s.kill_container)
        return _lead(s, f.first_s) if f else "-"

    healthy = s.kill_s is None
    false_pages = []
    if healthy and page:
        false_pages.append(f"headroom{name(page)}")
    if healthy and common:
        false_pages.append("common")
    return [
        s.name,
        "none" if healthy else _hm(s.kill_s or 0),
        _lead(s, ticket.first_s if ticket else None) + name(ticket),
        _lead(s, page.first_s if page else None) + name(page),
        f"{filling('warning')} / {filling('critical')}",
        _lead(s, common.first_s if common else None),
        ", ".join(false_pages) or "none",
    ]


HEADER = ["scenario", "kill at", "headroom first ticket", "headroom first page",
          "FillingUp warn / crit", "common rule page", "false pages"]


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    lines = [" | ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip()
             for r in [HEADER, *rows]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool not found on PATH", file=sys.stderr)
        return 2
    scenarios = sc.all_scenarios()
    with tempfile.TemporaryDirectory(prefix="headroom-sidebyside-") as tmp:
        work = Path(tmp)
        (work / "headroom.rules.yaml").write_text(rules_yaml())
        (work / "common.rules.yaml").write_text(yamlout.dump(common_rules()))
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda s: replay(s, work, promtool), scenarios))
    print("Lead time of the first alert before the kill (unreclaimable memory reaches the "
          "limit; kill time counted from 00:00 UTC day 0). FillingUp: on the cgroup that "
          "is killed. Healthy scenarios: when anything fired.")
    print(table([row(s, fs) for s, fs in zip(scenarios, results, strict=True)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
