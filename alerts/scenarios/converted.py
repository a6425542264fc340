"""Cases made from elsewhere: the first wave's clean scenarios (``first_wave``) and the
recording of a real end-to-end run, with what each must notify."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from exporter import catalog as c

from .recording import FILL, NEAR, RECLAIM, STALE, Case, Key, Value


# --- the original scenarios, as cases ----------------------------------------------------------
def from_scenario(s: object) -> Case:
    """An ``alerts.scenarios.series.Scenario`` (the first wave's clean series) as a case:
    the FillingUp ticket and page on the killed cgroup are required with their lead
    times, any other memory alert of the pod is allowed; healthy ones stay silent."""
    from . import series as sc

    assert isinstance(s, sc.Scenario)
    series: dict[str, list[Value]] = {
        k: [None if x is None else float(round(x)) if abs(x) >= 1000 else float(round(x, 9))
            for x in v]
        for k, v in sc.render(s).items()}
    expect: set[Key] = set()
    leads: dict[Key, int] = {}
    if s.kill_s is not None:
        ticket = (s.warning_alert, "warning", s.pod, s.kill_container)
        page = (FILL, "critical", s.pod, s.kill_container)
        expect = {ticket, page}
        leads = {ticket: s.min_warning_lead_s, page: s.min_critical_lead_s}
    allow = {(a, sev, s.pod, ctr) for a in (FILL, NEAR, RECLAIM, "HeadroomHiddenMemoryGrowth",
                                            "HeadroomKVOffloadWillNotFit")
             for sev in ("warning", "critical") for ctr in ("", *s.containers)}
    return Case(s.name, "first wave", s.title, s.step_s, s.end_s, series,
                killed=s.kill_s is not None, expect=frozenset(expect),
                allow=frozenset(allow) if s.kill_s is not None else frozenset(),
                min_lead_s=leads)


def first_wave_names() -> list[str]:
    """The first wave's case names, without converting its series (a test's marks name
    them at collection)."""
    from . import first_wave as fw

    return [s.name for s in fw.all_scenarios()]


@functools.cache
def first_wave() -> tuple[Case, ...]:
    """The first wave's scenarios as cases, converted once per process (every described
    case looked up by name reads them)."""
    from . import first_wave as fw

    return tuple(from_scenario(s) for s in fw.all_scenarios())


# --- a recorded real run ------------------------------------------------------------------------
def recorded(path: Path) -> tuple[Case, int]:
    """The raw series of a real end-to-end run (``tests/e2e/test_e2e_alerting.py`` with
    ``HEADROOM_RECORD_E2E``) as a case, and the scale its rules were shrunk by. A sample
    missing after one that was there is a staleness marker: Prometheus wrote one there
    (a failed scrape, the exporter restarting), which is why the range query has none."""
    doc = json.loads(path.read_text())
    step, kill = int(doc["step_s"]), int(doc["kill_s"])
    n = kill // step + 1
    series: dict[str, list[Value]] = {}
    for s in doc["series"]:
        m = dict(s["metric"])
        name = m.pop("__name__")
        key = name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(m.items())) + "}"
        vals: list[Value] = [None] * n
        for t, v in s["values"]:
            if 0 <= int(t) // step < n:
                vals[int(t) // step] = float(v)
        for i in range(1, n):
            if vals[i] is None and isinstance(vals[i - 1], float):
                vals[i] = STALE
        series[key] = vals
    pod = str(doc["pod"])
    ctr = next(s["metric"]["container"] for s in doc["series"]
               if s["metric"]["__name__"] == c.MEMORY_LIMIT_BYTES.name
               and s["metric"].get("container"))
    page = (FILL, "critical", pod, ctr)  # the container's limit binds (it is the pod's)
    case = Case("recorded-e2e", "replay", str(doc["about"]), step, kill, series,
                killed=True, expect=frozenset({page}),
                allow=frozenset({(a, sev, pod, x)
                                 for a in (FILL, NEAR, RECLAIM, "HeadroomHiddenMemoryGrowth")
                                 for sev in ("warning", "critical") for x in ("", ctr)}),
                min_lead_s={page: 1})
    return case, int(doc["scale"])
