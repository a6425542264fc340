"""``headroom explain``'s pure parts on literal evidence: the rules (verdict, binding
cgroup, what grows, causes, actions), the queries and the parsing of answers. The real
Prometheus runs are in ``test_explain_prometheus.py`` (scenarios) and
``test_oncall_real.py`` (a real OOM run)."""

from __future__ import annotations

import json

import pytest

from exporter.oncall import explain as x
from exporter.oncall.diagnosis import (
    AT_RISK,
    HEALTHY,
    NO_DATA,
    CgroupEvidence,
    Evidence,
    KillEvidence,
    KvEvidence,
    ProcessEvidence,
    TmpfsEvidence,
    Trend,
    diagnose,
)
from exporter.oncall.prom_client import PromSample, parse_vector
from exporter.oncall.units import DAY, fmt_duration, fmt_rate

MiB, GiB = 1 << 20, 1 << 30


def flat(v: float) -> Trend:
    return Trend(v, 0.0, 0.0, 0.0, 0.0)


def growing(v: float, per_day: float, rise: bool = True) -> Trend:
    r = per_day / DAY
    return Trend(v, r, r, r, per_day if rise else None)


def cgroup(container: str = "vllm", limit: float = 32 * GiB, u: Trend | None = None,
           **kinds: Trend) -> CgroupEvidence:
    return CgroupEvidence(container, limit, u or flat(10 * GiB), kinds=kinds)


def ev(*cgroups: CgroupEvidence, **kw: object) -> Evidence:
    return Evidence("llm", "vllm-0", 0.0, cgroups, **kw)  # type: ignore[arg-type]


def test_no_series_is_no_data() -> None:
    d = diagnose(ev())
    assert (d.verdict, d.exit_code) == (NO_DATA, 3)
    assert d.summary.startswith("NO DATA") and d.closeness is None


def test_flat_pod_is_healthy() -> None:
    d = diagnose(ev(cgroup(anon=flat(8 * GiB), shmem=flat(GiB))))
    assert (d.verdict, d.exit_code) == (HEALTHY, 0)
    assert d.growth == () and d.causes == () and d.actions == ()
    assert "not growing" in d.summary


def test_diurnal_swing_is_not_growth() -> None:
    """The 1-day slope of a daily swing is not zero, but its floor does not rise."""
    swing = Trend(20 * GiB, 1e6, 5e5, 3 * GiB / DAY, 0.0)
    d = diagnose(ev(cgroup(u=swing, anon=swing)))
    assert d.verdict == HEALTHY and d.growth == ()


def test_short_history_uses_the_slope() -> None:
    d = diagnose(ev(cgroup(limit=256 * MiB, u=growing(200 * MiB, 4 * MiB * DAY, rise=False),
                           anon=growing(190 * MiB, 4 * MiB * DAY, rise=False))))
    assert d.verdict == AT_RISK
    assert d.closeness is not None and d.closeness.time_to_limit_s == pytest.approx(14, 0.01)
    assert [g.name for g in d.growth] == ["anon", "memory no process owns"]


def test_near_limit_without_lasting_growth_is_at_risk_and_explained_by_now() -> None:
    fresh = Trend(30 * GiB, 1 * GiB / 3600, None, None, 0.0)  # a ramp of the last hour
    d = diagnose(ev(cgroup(u=fresh, anon=fresh)))
    assert d.verdict == AT_RISK and "94% of the limit" in d.reasons[0]
    assert d.growth[0].name == "anon"


def test_page_cache_squeezed_and_working_set_note() -> None:
    u = growing(20 * GiB, 2 * GiB)
    c = CgroupEvidence("vllm", 32 * GiB, u, usage=30 * GiB, working_set=29 * GiB,
                       kinds={"anon": u, "file_active": growing(8 * GiB, -2 * GiB)})
    d = diagnose(ev(c))
    squeezed = [g for g in d.growth if g.what == "page_cache"]
    assert squeezed[0].name == "page cache squeezed out" and squeezed[0].rate < 0
    assert d.growth[-1].what == "page_cache"  # listed last
    assert any("working set 29.0 GiB" in n for n in d.notes)


def test_a_single_container_pod_names_the_container_not_the_pod_cgroup() -> None:
    u = growing(20 * GiB, 2 * GiB)
    pod = cgroup("", u=growing(20 * GiB + 16 * MiB, 2 * GiB))
    d = diagnose(ev(pod, cgroup("vllm", u=u)))
    assert d.closeness is not None and d.closeness.container == "vllm"


def test_pod_level_charges_of_its_own_make_the_pod_cgroup_binding() -> None:
    pod = cgroup("", u=growing(26 * GiB, 2 * GiB))
    d = diagnose(ev(pod, cgroup("vllm", u=flat(14 * GiB)),
                    cgroup("sidecar", u=growing(10 * GiB, 2 * GiB))))
    assert d.closeness is not None and d.closeness.container == ""


def test_process_attribution_and_anon_leak_cause() -> None:
    leak = growing(9 * GiB, 2 * GiB)
    d = diagnose(ev(cgroup(u=growing(18 * GiB, 2 * GiB), anon=leak),
                    processes=(ProcessEvidence("vllm", "EngineCore", leak, flat(0)),
                               ProcessEvidence("vllm", "APIServer", flat(GiB), flat(0)))))
    assert [g.name for g in d.growth if g.what == "process"] == ["EngineCore"]
    assert d.causes[0].code == "anon_leak" and "EngineCore" in d.causes[0].title
    assert any(a.startswith("runbook: ") and a.endswith("HeadroomMemoryFillingUp.md")
               for a in d.actions)


def test_kv_offload_that_will_not_fit_is_at_risk_before_any_growth() -> None:
    d = diagnose(ev(cgroup(u=flat(26 * GiB)),
                    kv=(KvEvidence("vllm", "cpu", 16 * GiB, 0.25),)))
    assert d.verdict == AT_RISK
    assert d.causes[0].code == "kv_offload" and d.causes[0].settings == ("--kv-offloading-size",)
    assert "12.0 GiB still to fill against 6.0 GiB of headroom" in d.causes[0].detail


def test_stale_shm_is_a_cause_with_a_remedy_even_when_healthy() -> None:
    d = diagnose(ev(cgroup("", u=flat(12 * GiB)),
                    tmpfs=(TmpfsEvidence("", "/dev/shm", flat(3 * GiB), 16 * GiB,
                                         flat(3 * GiB)),)))
    assert d.verdict == HEALTHY
    assert [c.code for c in d.causes] == ["stale_shm"]
    assert any("only a new pod gets a fresh /dev/shm" in a for a in d.actions)


def test_kills_make_a_pod_at_risk_and_link_the_post_mortem() -> None:
    d = diagnose(ev(cgroup(), kills=(KillEvidence("vllm", "EngineCore", 3, 1, "node-1:9847"),
                                      KillEvidence("", "unknown", 0, 0, "node-1:9847"))))
    assert d.verdict == AT_RISK and "1 OOM kill in the last day (victim EngineCore)" in d.summary
    assert [(k.process, k.total, k.postmortem) for k in d.kills] == [
        ("EngineCore", 3, "http://node-1:9847/debug/oom/")]


@pytest.mark.parametrize(("per_s", "text"), [
    (2 * GiB / DAY, "+2.0 GiB/day"), (-64 * MiB / DAY, "-64.0 MiB/day"),
    (4 * MiB, "+4.0 MiB/s"), (None, "n/a"), (3 * GiB / 3600, "+3.0 GiB/h")])
def test_rates_read_in_the_right_unit(per_s: float | None, text: str) -> None:
    assert fmt_rate(per_s) == text


def test_durations() -> None:
    assert [fmt_duration(s) for s in (14, 600, 9 * 3600, 5.5 * DAY)] == [
        "14 s", "10 min", "9.0 h", "5.5 days"]


# --- queries and answers -----------------------------------------------------------------------
def test_targets() -> None:
    assert x.parse_target("llm/vllm-0") == ("llm", "vllm-0")
    assert x.parse_target("vllm-0") == (None, "vllm-0")
    assert x.parse_target("/0d6c7b1a") == ("", "0d6c7b1a")  # no namespace: the pod UID
    for bad in ("", "llm/", "  "):
        with pytest.raises(x.UsageError):
            x.parse_target(bad)


def test_hostile_pod_names_stay_inside_the_string_literal() -> None:
    q = x.pod_queries("llm", 'a"} or vector(1) #\\', 'job="headroom"')
    assert 'pod="a\\"} or vector(1) #\\\\"' in q["limit"]
    assert all('job="headroom"' in expr for expr in q.values())


def test_every_query_names_a_contract_metric() -> None:
    from exporter import catalog

    names = {m.name for m in catalog.ALL} | {"headroom_tmpfs_orphaned_bytes"}
    for expr in x.pod_queries("llm", "p").values():
        used = {w for w in expr.replace("(", " ").replace("{", " ").split()
                if w.startswith("headroom_")}
        assert used and used <= names, used


def test_answers_to_evidence() -> None:
    s = PromSample
    answers = {
        "limit": [s({"container": ""}, 32 * GiB), s({"container": "vllm"}, 32 * GiB),
                  s({"container": "gone"}, 0)],
        "unreclaimable.now": [s({"container": ""}, 20 * GiB), s({"container": "vllm"}, 19e9)],
        "unreclaimable.d1h": [s({"container": "vllm"}, 10.0)],
        "kinds.now": [s({"container": "vllm", "kind": "anon"}, 1e9)],
        "processes.now": [s({"container": "vllm", "process": "EngineCore", "kind": "rss_anon"},
                            5e9)],
        "kills": [s({"container": "", "process": "EngineCore", "instance": "a:1"}, 2),
                  s({"container": "", "process": "EngineCore", "instance": "b:1"}, 3)],
        "kills1d": [s({"container": "", "process": "EngineCore", "instance": "b:1"}, 1)],
    }
    e = x.evidence("llm", "vllm-0", 0.0, answers)
    assert [c.container for c in e.cgroups] == ["", "vllm"]  # no limit: not judged
    vllm = e.cgroups[1]
    assert vllm.unreclaimable == Trend(19e9, 10.0) and vllm.kinds["anon"].now == 1e9
    assert e.processes == (ProcessEvidence("vllm", "EngineCore", Trend(5e9), None),)
    assert e.kills == (KillEvidence("", "EngineCore", 3, 1, "b:1"),)  # the exporter that saw most


def test_prometheus_answers_parse() -> None:
    body = json.loads('{"status":"success","data":{"resultType":"vector","result":['
                      '{"metric":{"container":"a"},"value":[1,"5"]},'
                      '{"metric":{"container":"b"},"value":[1,"NaN"]},'
                      '{"metric":{"container":"c"},"value":[1,"+Inf"]}]}}')
    assert parse_vector(body) == [PromSample({"container": "a"}, 5.0)]
    assert parse_vector({"data": {"resultType": "scalar", "result": [1, "2"]}}) == [
        PromSample({}, 2.0)]
    assert parse_vector({}) == []


def test_json_output_is_the_whole_diagnosis() -> None:
    d = diagnose(ev(cgroup(u=flat(31 * GiB))))
    doc = json.loads(x.to_json(d))
    assert doc["verdict"] == "at_risk" and doc["exit_code"] == 1
    assert doc["closeness"]["limit"] == 32 * GiB
    text = x.to_text(d)
    assert text.startswith("AT RISK llm/vllm-0: 97% of limit") and "\x1b[" not in text
    assert all(len(line) <= 80 for line in text.splitlines()[:2])
    assert "\x1b[1;31m" in x.to_text(d, x.ansi)


def test_every_runbook_named_exists() -> None:
    """The runbooks explain links to are the alerts' (alerts/runbooks/NAME.md)."""
    import re
    from pathlib import Path

    from exporter.oncall import diagnosis

    root = Path(__file__).parents[2]
    names = {n for f in Path(diagnosis.__file__).parent.glob("*.py")
             for n in re.findall(r'"(Headroom[A-Za-z]+)"', f.read_text())}
    assert names >= {"HeadroomMemoryFillingUp", "HeadroomPodOOMKilled"}
    missing = sorted(n for n in names if not (root / "alerts" / "runbooks" / f"{n}.md").is_file())
    assert not missing, missing


def test_escape_sequences_in_names_never_reach_the_terminal() -> None:
    evil = "Engine\x1b]0;pwned\x07\x1b[2J\nCore"
    answers = {
        "limit": [PromSample({"container": evil}, 32 * GiB)],
        "unreclaimable.now": [PromSample({"container": evil}, 31 * GiB)],
        "processes.now": [PromSample({"container": evil, "process": evil, "kind": "rss_anon"}, 1)],
    }
    e = x.evidence(evil, evil, 0.0, answers)
    text = x.to_text(diagnose(e)) + x.to_json(diagnose(e))
    assert "\x1b" not in text and "\x07" not in text
    assert "Engine?]0;pwned??[2J?Core" in text


def test_what_grows_is_the_pages_series_when_there_is_a_forecast() -> None:
    """With a forecast, "What grows" opens with TOP_GROWER at its own rate (what the
    page's text says), then KIND_GROWTH and PROCESS_GROWTH above noise, then /dev/shm;
    not the raw 1 h trends (here they say the API server's swing grows fastest)."""
    from exporter.oncall import forecast as fc
    swing = 8 * GiB / DAY
    leak = 1.5 * GiB / DAY
    vllm = cgroup("vllm", 24 * GiB, growing(16 * GiB, 9.5 * GiB), anon=growing(15 * GiB, 9 * GiB))
    procs = (ProcessEvidence("vllm", "APIServer", growing(5 * GiB, 8 * GiB), None),
             ProcessEvidence("vllm", "EngineCore", growing(8 * GiB, 1.5 * GiB), None))
    f = fc.Forecast("llm", "vllm-0", "vllm", 24 * GiB, 16 * GiB, True,
                    {"lasting": leak}, 17 * GiB, 4 * DAY, "lasting",
                    fc.Grower("anon", "EngineCore", leak), fc.RECORDED,
                    {"anon": swing + leak, "kernel": 0.0}, {"APIServer": swing,
                                                            "EngineCore": leak})
    pod = fc.Forecast("llm", "vllm-0", "", 24 * GiB, 16.1 * GiB, False,
                      kind_growth={"dev_shm": 0.0})
    d = diagnose(ev(vllm, cgroup("", 24 * GiB, growing(16.1 * GiB, 9.5 * GiB)),
                    processes=procs, forecasts=(f, pod)))
    first = d.growth[0]
    assert (first.what, first.name, first.rate, first.now) == \
        ("grower", "EngineCore anon", leak, 8 * GiB)
    assert [(g.what, g.name) for g in d.growth[1:]] == [
        ("kind", "anon"), ("process", "APIServer"), ("process", "EngineCore"),
        ("tmpfs", "/dev/shm")]
    assert d.growth[-1].detail == "flat"
    assert d.closeness is not None and d.closeness.by_horizon == (("lasting", leak),)
    text = x.to_text(d)
    assert "EngineCore anon (top grower)" in text and "growth         short -" in text
    assert "trend          1h" not in text


def test_peaks_within_the_noise_of_the_limit_are_the_reason_not_the_trends_hours() -> None:
    """The page's noise band (PEAK_HEADROOM_SWINGS below 0.5): explain gives it as the
    reason with the swings, beside the trend's time to limit; just outside it, only
    the figure."""
    from exporter.oncall import forecast as fc
    leak = 0.6 * GiB / DAY

    def explained(swings: float) -> tuple[list[str], str]:
        f = fc.Forecast("llm", "vllm-0", "vllm", 80 * GiB, 79.8 * GiB, True,
                        {"lasting": leak}, 79.85 * GiB, 3.5 * 3600, "lasting",
                        fc.Grower("anon", "EngineCore", leak), fc.RECORDED,
                        peak_swings=swings)
        d = diagnose(ev(cgroup("vllm", 80 * GiB, growing(79.8 * GiB, 0.6 * GiB)),
                        forecasts=(f,)))
        assert d.verdict == AT_RISK
        return list(d.reasons), x.to_text(d)

    reasons, text = explained(0.35)
    assert any("within the noise of the limit (0.35 of its quiet hours' swing)" in r
               for r in reasons), reasons
    assert "peaks          0.35 quiet-hour swings below the limit (the page fires " \
           "below 0.5)" in text
    reasons, text = explained(0.8)
    assert not any("noise" in r for r in reasons) and "0.80 quiet-hour swings" in text
