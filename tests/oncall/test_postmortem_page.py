"""The post-mortem page renderer on literal documents: what it draws, and that hostile or
malformed documents are escaped and drawn partly, never crash it. (The page after a real
kill, in a real Chromium, is in ``tests/oncall/test_oncall_real.py``.)"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from exporter.postmortem.page import chart_data, render_document, render_index, wants_html

MiB = 1 << 20
KILL = 1_800_000_000.0


def document(process: str = "EngineCore", **over: Any) -> dict[str, Any]:
    """A flight-recorder document (``headroom.oom_kill/v1``): a 60 s climb to 256 MiB."""
    usage = [[KILL - 60 + i, (100 + int(156 * i / 60)) * MiB] for i in range(61)]
    scrapes = [{
        "time": KILL - 60 + i, "usage": (100 + 156 * i // 60) * MiB, "limit": 256 * MiB,
        "unreclaimable": (80 + 156 * i // 60) * MiB, "working_set": 200 * MiB,
        "kinds": {"anon": (60 + 156 * i // 60) * MiB, "shmem": 16 * MiB, "kernel": 4 * MiB,
                  "file_active": 20 * MiB, "file_inactive": 0},
        "events": {"max": i},
        "processes": [{"process": process, "count": 1, "rss_anon": (60 + 156 * i // 60) * MiB,
                       "rss_file": MiB, "rss_shmem": 0},
                      {"process": "APIServer", "count": 1, "rss_anon": 40 * MiB,
                       "rss_file": MiB, "rss_shmem": 16 * MiB}],
        "tmpfs": [{"mount": "/dev/shm", "used": 16 * MiB, "size": 64 * MiB}],
    } for i in range(0, 61, 5)]
    doc = {"kind": "headroom.oom_kill/v1", "time": KILL, "time_utc": "2027-01-15T08:00:00Z",
           "namespace": "llm", "pod": "vllm-0", "container": "vllm",
           "cgroup": "/kubepods/burstable/podX/abc",
           "victim": {"process": process, "pid": 4242, "source": "kmsg"},
           "window_seconds": 900, "usage": usage, "scrapes": scrapes}
    doc.update(over)
    return doc


class _Checker(HTMLParser):
    """Collects tags and attributes; fails on a <script> or an external reference."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        assert tag not in ("script", "link", "img", "iframe", "object")
        for key in ("src", "href"):
            v = a.get(key) or ""
            assert not re.match(r"(https?:)?//", v), f"external reference {v}"


def parse(page: str) -> _Checker:
    p = _Checker()
    p.feed(page)
    return p


def test_document_page_draws_the_chart() -> None:
    page = render_document("x.json", document())
    tags = parse(page).tags
    classes = [a.get("class") for t, a in tags if t in ("path", "line", "svg")]
    for c in ("chart chart-memory wide", "chart chart-memory narrow",
              "chart chart-processes wide", "kind kind-anon",
              "kind kind-shmem", "kind kind-file_active", "usage", "unreclaimable", "limit",
              "kill", "process"):
        assert c in classes, c
    assert "kind kind-file_inactive" not in classes  # zero all along: not drawn
    assert "<b>EngineCore</b> (pid 4242, named by the kernel log)" in page
    assert "limit of <b>256.0 MiB</b>" in page
    assert '<meta name="viewport"' in page  # readable on a phone


def test_climb_reaches_the_limit_line() -> None:
    page = render_document("x.json", document())
    limit_y = float(re.search(r'class="limit"[^>]*y1="([\d.]+)"', page)[1])  # type: ignore[index]
    usage = re.search(r'class="usage"[^>]*d="([^"]+)"', page)[1]  # type: ignore[index]
    ys = [float(y) for y in re.findall(r"[ML][\d.]+,([\d.]+)", usage)]
    assert ys[0] > limit_y + 100 and abs(min(ys) - limit_y) < 2


HOSTILE = '<script>alert(1)</script>"\' onload=x &amp;'


def test_hostile_names_are_escaped() -> None:
    doc = document(process=HOSTILE, pod=HOSTILE, namespace="</title><script>",
                   cgroup=HOSTILE)
    doc["scrapes"][-1]["tmpfs"][0]["mount"] = HOSTILE
    page = render_document(HOSTILE, doc)
    parse(page)  # no script tag, no external reference
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27; onload=x &amp;amp;" in page
    index = render_index([(HOSTILE, doc)])
    parse(index)
    assert "<script>" not in index


@pytest.mark.parametrize("broken", [
    {},
    {"time": "soon", "usage": "lots", "scrapes": {"a": 1}},
    {"usage": [[1, 2, 3], ["x", 1], [None, None], [float("nan"), 1.0]],
     "scrapes": [None, 3, {"time": None}, {"time": KILL, "kinds": [], "processes": {}}]},
    {"victim": "someone", "window_seconds": -5, "pod_level": {"usage": 7}},
    {"scrapes": [{"time": KILL, "limit": True, "processes": [{"process": None}]}]},
])
def test_malformed_documents_draw_less_but_never_fail(broken: dict[str, Any]) -> None:
    page = render_document("x.json", broken)
    parse(page)
    assert "OOM kill" in page
    render_index([("x.json", broken), ("y.json", None)])


def test_pod_level_chart_when_present() -> None:
    doc = document()
    doc["pod_level"] = {"cgroup": "/kubepods/burstable/podX", "usage": doc["usage"],
                        "scrapes": doc["scrapes"]}
    page = render_document("x.json", doc)
    assert 'class="chart chart-pod wide"' in page


def test_index_lists_newest_first() -> None:
    old = document(time=KILL - 3600, victim={"process": "Worker_TP0"})
    page = render_index([("a-old.json", old), ("b-new.json", document())])
    assert page.index("b-new.json") < page.index("a-old.json")
    assert "Worker_TP0" in page and "EngineCore" in page
    assert "No OOM kill recorded" in render_index([])


def test_chart_keeps_the_top_processes_only() -> None:
    doc = document()
    for s in doc["scrapes"]:
        s["processes"] = [{"process": f"p{i}", "rss_anon": i * MiB} for i in range(50)]
    data = chart_data(doc, KILL, 900)
    assert [s.name for s in data.processes] == ["p49", "p48", "p47", "p46", "p45"]


@pytest.mark.parametrize(("accept", "fmt", "html"), [
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", None, True),
    ("application/json", None, False),
    ("application/json, text/html", None, False),
    (None, None, False),  # scripts and curl get JSON
    ("*/*", None, False),
    ("text/html", "json", False),
    ("application/json", "html", True),
])
def test_content_negotiation(accept: str | None, fmt: str | None, html: bool) -> None:
    assert wants_html(accept, fmt) is html


def test_the_axis_zooms_to_the_climb_with_the_whole_window_a_click_away() -> None:
    """A 60 s climb in a 15-minute window: the chart starts just before the climb (it
    filled the right-most 7% of a 15-minute axis before), the 15 minutes in <details>."""
    page = render_document("x.json", document())
    wide = re.search(r'<svg class="chart chart-memory wide".*?</svg>', page, re.S)
    assert wide is not None
    first_x = float(re.search(r'class="usage"[^>]*d="M([\d.]+),', wide.group(0))[1])
    assert first_x < 78 + 0.3 * (960 - 78 - 16), first_x
    assert "-10 s" in wide.group(0) and "kill" in wide.group(0)
    context = page[page.index('<details class="context">'):page.index("</details>")]
    assert "15 minutes before the kill" in context and 'chart-context wide' in context


def test_the_headline_says_what_grew_and_how_fast() -> None:
    page = render_document("x.json", document())
    verdict = re.search(r'<div class="verdict">(.*?)</div>', page, re.S)
    assert verdict is not None
    # EngineCore: 60 -> 216 MiB anon in the 60 s before the kill, 2.6 MiB/s.
    assert "EngineCore grew +156.0 MiB in the 60 s before it (+2.6 MiB/s)" in verdict[1]


def test_the_samplers_points_run_up_to_the_kill_past_the_last_scrape() -> None:
    doc = document()
    doc["usage"][-1] = [KILL - 0.4, 255.5 * MiB]  # a reading after the last scrape
    doc["scrapes"] = [s for s in doc["scrapes"] if s["time"] <= KILL - 10]
    page = render_document("x.json", doc)
    assert "the sampler&#x27;s last reading 0.4 s before the kill" in page
    assert "the last scrape 10 s before it" in page
    wide = re.search(r'<svg class="chart chart-memory wide".*?</svg>', page, re.S)
    assert wide is not None and wide.group(0).count("<circle") == len(doc["usage"])
