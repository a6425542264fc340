"""Replay a ``Case`` through a rules file with promtool and count notifications.

promtool evaluates the rules at every sample; one PromQL query at the end then reads the
whole ``ALERTS`` history through subqueries: per alert (name, severity, pod, container)
how many notification episodes began (firing now, not one step earlier, and not muted
by the shipped inhibit rules at that moment) and when the first began. The query
expects nothing, so promtool prints what it got; ``parse_got`` reads that.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from alerts import alertmanager, yamlout
from exporter.promql import duration

from .recording import STALE, Case, Key, Value

KEY_LABELS = ("alertname", "severity", "namespace", "pod", "container")
_GOT = re.compile(r"\{([^{}]*)\} ([-+0-9.eE]+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Stat:
    episodes: int
    first_s: float
    last_s: float = math.nan  # the last evaluation at which it notified (firing, unmuted)
    latest_s: float = math.nan  # when its last episode began


# --- promtool input ---------------------------------------------------------------------------
def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


def compress(values: list[Value]) -> str:
    """promtool input_series text: runs with a constant step as a+bxN, missing samples
    as _xN, staleness markers as ``stale``."""
    parts: list[str] = []
    i, n = 0, len(values)
    while i < n:
        v = values[i]
        if v is None or v == STALE:
            j = i
            while j + 1 < n and values[j + 1] == v:
                j += 1
            tok = "_" if v is None else STALE
            parts.append(tok if j == i else f"{tok}x{j - i + 1}" if v is None
                         else " ".join([STALE] * (j - i + 1)))
            i = j + 1
            continue
        assert isinstance(v, float)
        j = i + 1
        step: float | None = None
        if j < n and isinstance(values[j], float):
            step = round(values[j] - v, 9)  # type: ignore[operator]
            while j + 1 < n and isinstance(values[j + 1], float) \
                    and round(values[j + 1] - values[j], 9) == step:  # type: ignore[operator]
                j += 1
        if step is not None and j - i >= 2:
            parts.append(f"{_fmt(v)}{'+' if step >= 0 else '-'}{_fmt(abs(step))}x{j - i}")
            i = j + 1
        else:
            parts.append(_fmt(v))
            i += 1
    return " ".join(parts)


def _interval(case: Case) -> str:
    if not case.phase_shifted:
        return duration(case.step_s)
    return f"{case.step_s * 500}ms"


def _phased(case: Case, values: list[Value]) -> list[Value]:
    """Sample i at (i + 1/2) steps: the evaluations fall half way between scrapes."""
    if not case.phase_shifted:
        return values
    out: list[Value] = []
    for v in values:
        out += [None, v]
    return out


def rule_groups(rules_path: Path) -> list[str]:
    doc = yaml.safe_load(rules_path.read_text())
    return [g["name"] for g in doc["groups"]]


# --- the query ------------------------------------------------------------------------------------
def _alerts(matchers: tuple[tuple[str, str], ...], offset: str) -> str:
    sel = ", ".join(['alertstate="firing"',
                     *(alertmanager.matcher(k, v) for k, v in matchers)])
    return f"ALERTS{{{sel}}}" + (f" offset {offset}" if offset else "")


def notified(offset: str, inhibit: bool) -> str:
    """Alerts firing and not muted by an inhibit rule, ``offset`` ago."""
    firing = _alerts((), offset)
    if not inhibit:
        return firing
    muted = " or ".join(
        f"({_alerts(r.target, offset)} and on ({', '.join(r.equal)}) "
        f"{_alerts(r.source, offset)})"
        for r in alertmanager.INHIBIT_RULES
    )
    return f"({firing} unless ({muted}))"


# promtool's query engine holds at most 10,000 samples at once: one query per chunk.
CHUNK_STEPS = 800


def stats_query(case: Case, inhibit: bool, span_s: int) -> str:
    """Episodes begun and the first beginning per alert over the span up to the query's
    evaluation time."""
    step = duration(case.evaluation_s)
    starts = f"({notified('', inhibit)} unless {notified(step, inhibit)})"
    rng = f"[{duration(span_s)}:{step}]"
    by = ", ".join(KEY_LABELS)
    return (
        f'label_replace(sum by ({by}) (sum_over_time({starts}{rng})), '
        f'"stat", "episodes", "", "")\n'
        f"or\n"
        f'label_replace(min by ({by}) (min_over_time(({starts} * 0 + time()){rng})), '
        f'"stat", "first", "", "")\n'
        f"or\n"
        f'label_replace(max by ({by}) (max_over_time(({notified("", inhibit)} * 0 + '
        f'time()){rng})), "stat", "last", "", "")\n'
        f"or\n"
        f'label_replace(max by ({by}) (max_over_time(({starts} * 0 + time()){rng})), '
        f'"stat", "latest", "", "")'
    )


def chunks(case: Case) -> list[tuple[int, int]]:
    """(until, span) pairs covering (0, end] in CHUNK_STEPS evaluations each."""
    span = CHUNK_STEPS * case.evaluation_s
    return [(min(u, case.end_s), min(u, case.end_s) - (u - span))
            for u in range(span, case.end_s + span, span)]


def test_file(case: Case, rules: list[Path], inhibit: bool) -> dict[str, Any]:
    return {
        "rule_files": [str(p) for p in rules],
        "evaluation_interval": duration(case.evaluation_s),
        "group_eval_order": [g for p in rules for g in rule_groups(p)],
        "tests": [{
            "name": case.name,
            # A phase shift samples between evaluations: input at half the step.
            "interval": _interval(case),
            "input_series": [{"series": k, "values": compress(_phased(case, v))}
                             for k, v in sorted(case.series.items())],
            # Expect nothing: promtool then prints what it got.
            "promql_expr_test": [
                {"expr": stats_query(case, inhibit, span),
                 "eval_time": duration(until), "exp_samples": []}
                for until, span in chunks(case)
            ],
        }],
    }


def parse_got(output: str) -> dict[Key, Stat]:
    """Episodes summed and first beginnings minimised over every chunk's ``got:``."""
    episodes: dict[Key, int] = {}
    first: dict[Key, float] = {}
    last: dict[Key, float] = {}
    latest: dict[Key, float] = {}
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith("got:"):
            continue
        for labels, value in _GOT.findall(line):
            lbl = dict(_LABEL.findall(labels))
            key = (lbl.get("alertname", ""), lbl.get("severity", ""), lbl.get("pod", ""),
                   lbl.get("container", ""))
            if lbl["stat"] == "episodes":
                episodes[key] = episodes.get(key, 0) + int(float(value))
            elif lbl["stat"] == "first":
                first[key] = min(first.get(key, math.inf), float(value))
            elif lbl["stat"] == "latest":
                latest[key] = max(latest.get(key, -math.inf), float(value))
            else:
                last[key] = max(last.get(key, -math.inf), float(value))
    return {k: Stat(n, first.get(k, math.nan), last.get(k, math.nan),
                    latest.get(k, math.nan))
            for k, n in episodes.items() if n > 0}


def replay(case: Case, rules: list[Path], workdir: Path, promtool: str,
           inhibit: bool = True, tag: str = "", cache: Path | None = None
           ) -> dict[Key, Stat]:
    """Run promtool on the case; with ``cache``, a replay of the same test file (same
    series, rules and query: same hash) is read back instead of run again."""
    doc = test_file(case, rules, inhibit)
    text = yamlout.dump(doc)
    # The same series, query and rules give the same replay, wherever the files lie.
    same = yamlout.dump({**doc, "rule_files": [p.name for p in rules]})
    digest = hashlib.sha256(
        (same + "".join(p.read_text() for p in rules)).encode()).hexdigest()[:24]
    hit = cache / f"{case.name}-{digest}.json" if cache else None
    if hit is not None and hit.exists():
        return {tuple(k.split("\t")): Stat(*v)
                for k, v in json.loads(hit.read_text()).items()}
    path = workdir / f"{case.name}{tag}.test.yaml"
    path.write_text(text)
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                          text=True, timeout=3600, check=False)
    out = proc.stdout + proc.stderr
    if proc.returncode == 0:
        stats: dict[Key, Stat] = {}  # nothing ever fired
    elif "got:" not in out:
        raise RuntimeError(f"promtool failed on {case.name}:\n{out[-3000:]}")
    else:
        stats = parse_got(out)
    if hit is not None:
        hit.parent.mkdir(parents=True, exist_ok=True)
        hit.write_text(json.dumps({"\t".join(k): [v.episodes, v.first_s, v.last_s,
                                                   v.latest_s]
                                   for k, v in stats.items()}))
    return stats


# --- verdicts -------------------------------------------------------------------------------------
def problems(case: Case, stats: Mapping[Key, Stat]) -> list[str]:
    """What a case's expectations find wrong with a replay (empty: it passes)."""
    out = []
    stats = {k: v for k, v in stats.items() if k[0].startswith("Headroom")}
    for key in sorted(case.expect - set(stats)):
        out.append(f"{_name(key)} never notified")
    for key, st in sorted(stats.items()):
        if key not in case.expect | case.allow:
            out.append(f"{_name(key)} notified {st.episodes}x, unexpected "
                       f"(first at {_hm(st.first_s)})")
        elif st.episodes > case.max_episodes:
            out.append(f"{_name(key)} notified {st.episodes}x (at most "
                       f"{case.max_episodes} expected)")
        if case.quiet_after_s is not None and st.last_s > case.quiet_after_s:
            out.append(f"{_name(key)} still notifying at {_hm(st.last_s)} (quiet from "
                       f"{_hm(case.quiet_after_s)})")
        if not case.killed:
            continue
        lead = case.end_s - st.first_s
        if key in case.min_lead_s and lead < case.min_lead_s[key]:
            out.append(f"{_name(key)} only {_hm(lead)} before the kill "
                       f"(needs {_hm(case.min_lead_s[key])})")
        if key[1] == "critical" and case.max_page_lead_s and lead > case.max_page_lead_s:
            out.append(f"{_name(key)} paged {_hm(lead)} before the kill "
                       f"(early: more than {_hm(case.max_page_lead_s)})")
    return out


def _name(key: Key) -> str:
    alert, sev, pod, ctr = key
    return f"{alert.removeprefix('Headroom')}/{sev}[{pod}/{ctr or 'pod'}]"


def _hm(seconds: float) -> str:
    sign = "-" if seconds < 0 else ""
    h, m = divmod(round(abs(seconds) / 60), 60)
    return f"{sign}{h}h{m:02d}m"


_RANGE = re.compile(r"\[(\d+[smhdwy][0-9smhdwy]*)(:[0-9smhdwy]*)?\]")


def shortened(rules_text: str) -> str:
    """Every range and subquery range 1 ms shorter: a sample on a range's left edge
    falls out, as in Prometheus 3 (left-open ranges), which cannot be installed here."""
    def one(m: re.Match[str]) -> str:
        ms = _seconds(m.group(1)) * 1000 - 1
        return f"[{ms}ms{m.group(2) or ''}]"

    return _RANGE.sub(one, rules_text)


def _seconds(text: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhdwy])", text))


__all__ = ["Stat", "compress", "parse_got", "problems", "replay", "shortened",
           "stats_query"]
