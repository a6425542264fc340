"""Replay every case through the original rules (the first version's, kept in
``fixtures/original.rules.yaml``) and the current ones, and print one line per case:
whether it passes, how long before the kill the first ticket and the first page came, and
how many notifications went out before the kill (flapping counts).

The current rules are replayed with the shipped Alertmanager inhibition applied (what a
pager receives); the original had none. The original's replay also carries the rule most
teams have, the kubelet working set above 90 % of the limit for 5 minutes, for
comparison.

    python -m alerts.scenarios.sidebyside [CASE ...]      # needs promtool on PATH
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from alerts import yamlout
from alerts.generate import rules_yaml
from exporter import catalog as c

from . import cases, converted
from .evaluate import Stat, _hm, problems, replay
from .recording import Case, Key

ORIGINAL_RULES = Path(__file__).resolve().parent / "fixtures" / "original.rules.yaml"
COMMON_ALERT = "CommonWorkingSetNearLimit"


def common_rules() -> dict[str, Any]:
    """The rule most teams have: kubelet working set over limit, containers only."""
    sel = 'job="headroom", container!=""'
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


def all_cases(names: list[str] | None = None) -> list[Case]:
    makers: list[Callable[[], Case]] = list(cases.ALL)
    out = [f() for f in makers if not names or f.__name__ in names
           or f.__name__.replace("_", "-") in names]
    if not names or "first-wave" in names:
        out += converted.first_wave()
    return out


def _lead(case: Case, first: float | None) -> str:
    if first is None:
        return "-"
    return _hm(case.end_s - first) if case.killed else f"at {_hm(first)}"


def summary(case: Case, stats: Mapping[Key, Stat]) -> list[str]:
    ours = {k: v for k, v in stats.items() if k[0].startswith("Headroom")}

    def first(sev: str) -> float | None:
        times = [v.first_s for k, v in ours.items() if k[1] == sev]
        return min(times) if times else None

    pages = sum(v.episodes for k, v in ours.items() if k[1] == "critical")
    tickets = sum(v.episodes for k, v in ours.items() if k[1] == "warning")
    common = [v.first_s for k, v in stats.items() if k[0] == COMMON_ALERT]
    bad = problems(case, stats)
    return ["pass" if not bad else f"FAIL ({len(bad)})", _lead(case, first("warning")),
            _lead(case, first("critical")), f"{pages}p/{tickets}t",
            _lead(case, min(common) if common else None)]


HEADER = ["case", "class", "kill", "before", "ticket", "page", "notif", "common",
          "after", "ticket", "page", "notif"]


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    lines = [" | ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip()
             for r in [HEADER, *rows]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def run(selected: list[Case], promtool: str, workers: int = 2,
        cache: Path | None = None, sides: tuple[str, ...] = ("before", "after"),
        ) -> list[tuple[Case, dict[Key, Stat], dict[Key, Stat]]]:
    with tempfile.TemporaryDirectory(prefix="headroom-sidebyside-") as tmp:
        work = Path(tmp)
        new, old, common = work / "new.rules.yaml", work / "old.rules.yaml", \
            work / "common.rules.yaml"
        new.write_text(rules_yaml())  # named as shipped: the cache keys on names
        old.write_text(ORIGINAL_RULES.read_text())
        common.write_text(yamlout.dump(common_rules()))

        def both(case: Case) -> tuple[Case, dict[Key, Stat], dict[Key, Stat]]:
            before = after = {}
            if "before" in sides:
                before = replay(case, [old, common], work, promtool, inhibit=False,
                                tag="-old", cache=cache)
            if "after" in sides:
                after = replay(case, [new], work, promtool, inhibit=True, tag="-new",
                               cache=cache)
            return case, before, after

        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(both, selected))


def main(argv: list[str] | None = None) -> int:
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool not found on PATH", file=sys.stderr)
        return 2
    args = list(sys.argv[1:] if argv is None else argv)
    # --cache DIR: reuse replays of unchanged files; --before / --after: one side only.
    cache = Path(args[args.index("--cache") + 1]) if "--cache" in args else None
    sides = tuple(s for s in ("before", "after") if f"--{s}" in args) or ("before", "after")
    names = [a for a in args if not a.startswith("--") and (cache is None or a != str(cache))]
    results = run(all_cases(names or None), promtool, cache=cache, sides=sides)
    rows = []
    for case, before, after in results:
        kill = _hm(case.end_s) if case.killed else "none"
        b, a = summary(case, before), summary(case, after)
        rows.append([case.name, case.cls, kill, b[0], b[1], b[2], b[3], b[4],
                     a[0], a[1], a[2], a[3]])
    print("Lead of the first ticket / page before the kill (h:mm; healthy cases: when it "
          "fired), notifications before the kill (p = pages, t = tickets; each episode "
          "counts), the common rule's first page. before: the original rules; after: these "
          "rules with alerts/alertmanager.yaml's inhibition.")
    print(table(rows))
    failed = False
    for case, _, after in results:
        for p in problems(case, after):
            failed = True
            print(f"  after, {case.name}: {p}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
