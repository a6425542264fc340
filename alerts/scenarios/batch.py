"""Replay many draws in one promtool run: each draw's pods and exporter instances get a
suffix of their own (``~3``), their samples are laid on one grid, and the stats are read
back per draw.

promtool's cost is mostly per evaluation step and rule, not per series: six draws of
60-73 h, evaluated every minute, took 202 s in one run against 579 s alone (stop 45);
each draw added costs about a quarter of a single replay as long as the run. Draws
share a run where they share an evaluation interval and a rule file (a draw sampled
half way between evaluations keeps its own phase on the shared grid). The rules only
ever join and aggregate by namespace, pod, container and instance, so draws with
distinct pods and instances cannot see each other.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Sequence
from functools import reduce
from pathlib import Path
from typing import Any

from alerts import yamlout
from exporter.promql import duration

from .evaluate import _GOT, _LABEL, KEY_LABELS, Stat, compress, notified, rule_groups
from .recording import Key, Value

_OWNED = re.compile(r'\b(pod|instance)="([^"]*)"')
SEP = "~"
# promtool's engine holds at most 10,000 samples in one query: the stats query's
# subquery holds one per firing alert series and evaluation.
SAMPLE_BUDGET = 8000


END = "headroom_batch_end"  # per draw: its end (the kill), a series no rule reads


def relabel(key: str, j: int) -> str:
    return _OWNED.sub(lambda m: f'{m.group(1)}="{m.group(2)}{SEP}{j}"', key)


def _origin_ms(case: Any) -> tuple[int, int]:
    """(first sample, spacing) in ms: a phase shift samples half way between steps."""
    return (case.step_s * 500 if case.phase_shifted else 0), case.step_s * 1000


def _mine(expr: str) -> str:
    """The alerts of each draw (label ``draw``) up to its own end, as a single replay
    that stops there sees them."""
    for label in ("instance", "pod"):
        expr = f'label_replace({expr}, "draw", "$1", "{label}", ".+{SEP}([0-9]+)")'
    return f"({expr} and on (draw) ({END} >= time()))"


def stats_query(eval_s: int, span_s: int) -> str:
    """evaluate.stats_query per draw: episodes begun, the first and last notification,
    the last episode's beginning."""
    step = duration(eval_s)
    starts = _mine(f"({notified('', True)} unless {notified(step, True)})")
    now = _mine(notified("", True))
    rng = f"[{duration(span_s)}:{step}]"
    by = ", ".join((*KEY_LABELS, "draw"))
    return (
        f'label_replace(sum by ({by}) (sum_over_time({starts}{rng})), '
        f'"stat", "episodes", "", "")\n'
        f"or\n"
        f'label_replace(min by ({by}) (min_over_time(({starts} * 0 + time()){rng})), '
        f'"stat", "first", "", "")\n'
        f"or\n"
        f'label_replace(max by ({by}) (max_over_time(({now} * 0 + time()){rng})), '
        f'"stat", "last", "", "")\n'
        f"or\n"
        f'label_replace(max by ({by}) (max_over_time(({starts} * 0 + time()){rng})), '
        f'"stat", "latest", "", "")'
    )


def test_file(cases: Sequence[Any], rules: Sequence[Path], chunk_steps: int) -> dict[str, Any]:
    eval_s = {c.evaluation_s for c in cases}
    assert len(eval_s) == 1, "one evaluation interval per batch"
    # One grid for every draw's own samples (scrape steps and phases may differ): a
    # draw's samples land on it at their own times, with nothing in between.
    grid_ms = reduce(math.gcd, (v for c in cases for v in _origin_ms(c) if v))
    end_s = max(c.end_s for c in cases)
    series: dict[str, list[Value]] = {}
    for j, case in enumerate(cases):
        first, spacing = _origin_ms(case)
        for key, values in case.series.items():
            out: list[Value] = [None] * ((first + spacing * (len(values) - 1)) // grid_ms + 1)
            for i, v in enumerate(values):
                out[(first + spacing * i) // grid_ms] = v
            series[relabel(key, j)] = out
    for j, case in enumerate(cases):
        series[f'{END}{{draw="{j}"}}'] = [float(case.end_s)] * (end_s * 1000 // grid_ms + 1)
    evaluation_s = eval_s.pop()
    step = evaluation_s * chunk_steps
    queries = [{"expr": stats_query(evaluation_s, min(u, end_s) - (u - step)),
                "eval_time": duration(min(u, end_s)), "exp_samples": []}
               for u in range(step, end_s + step, step)]
    return {
        "rule_files": [str(p) for p in rules],
        "evaluation_interval": duration(evaluation_s),
        "group_eval_order": [g for p in rules for g in rule_groups(p)],
        "tests": [{"name": "batch", "interval": f"{grid_ms}ms",
                   "input_series": [{"series": k, "values": compress(v)}
                                    for k, v in sorted(series.items())],
                   "promql_expr_test": queries}],
    }


def parse(output: str, n: int) -> list[dict[Key, Stat]]:
    """Per draw: episodes summed, first beginnings minimised, over every chunk."""
    acc: list[dict[Key, list[float]]] = [{} for _ in range(n)]
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith("got:"):
            continue
        for labels, value in _GOT.findall(line):
            lbl = dict(_LABEL.findall(labels))
            if "draw" not in lbl:
                continue
            j = int(lbl["draw"])
            pod = lbl.get("pod", "").rsplit(SEP, 1)[0]
            key = (lbl.get("alertname", ""), lbl.get("severity", ""), pod,
                   lbl.get("container", ""))
            st = acc[j].setdefault(key, [0.0, math.inf, -math.inf, -math.inf])
            if lbl["stat"] == "episodes":
                st[0] += float(value)
            elif lbl["stat"] == "first":
                st[1] = min(st[1], float(value))
            elif lbl["stat"] == "latest":
                st[3] = max(st[3], float(value))
            else:
                st[2] = max(st[2], float(value))

    def seen(x: float) -> float:
        return x if math.isfinite(x) else math.nan

    return [{k: Stat(int(e), seen(f), seen(x), seen(y))
             for k, (e, f, x, y) in a.items() if e > 0} for a in acc]


def replay(cases: Sequence[Any], rules: Sequence[Path], workdir: Path, promtool: str
           ) -> list[dict[Key, Stat]]:
    """Stats per case, in order; the chunks shrink until the stats query fits."""
    chunk = max(20, min(800, SAMPLE_BUDGET // max(1, 3 * len(cases))))
    while True:
        path = workdir / "batch.test.yaml"
        path.write_text(yamlout.dump(test_file(cases, rules, chunk)))
        proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                              text=True, timeout=6 * 3600, check=False)
        out = proc.stdout + proc.stderr
        if "too many samples" in out and chunk > 5:
            chunk //= 2
            continue
        if proc.returncode == 0:
            return [{} for _ in cases]
        if "got:" not in out:
            raise RuntimeError(f"promtool failed on a batch:\n{out[-3000:]}")
        return parse(out, len(cases))


__all__ = ["parse", "relabel", "replay", "test_file"]
