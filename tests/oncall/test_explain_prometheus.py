"""``headroom explain`` against a real Prometheus holding scenario pods.

Each scenario of ``tests/helpers/explain_scenarios.py`` is rendered as the exporter's series over
two and a half days ending now, turned into TSDB blocks by ``promtool tsdb
create-blocks-from openmetrics`` and served by a real ``prometheus``; the real command
(``python -m exporter.cli explain``) then judges each pod, and its verdict, exit code,
growing kind and process, cause and vLLM setting are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_e2e_alerting import free_port, wait_http
from tests.helpers import explain_scenarios as es
from tests.helpers.stack import need_binaries

pytestmark = pytest.mark.prometheus

SCENARIOS = {sc.name: sc for sc in (f() for f in es.ALL)}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    need_binaries("prometheus", "promtool")
    tmp = tmp_path_factory.mktemp("explain-prom")
    # The last sample a few seconds ago: inside the 5-minute lookback of an instant query.
    end = float(int(time.time()) - 5)
    om = tmp / "scenarios.om"
    om.write_text(es.openmetrics(list(SCENARIOS.values()), end))
    tsdb = tmp / "tsdb"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                    str(om), str(tsdb)], check=True, timeout=300)
    (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tsdb}", "--storage.tsdb.retention.time=30d",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/-/ready", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def explain(prom: str, *args: str) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "exporter.cli", "explain",
                        f"--prometheus.url={prom}", *args],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def explain_json(prom: str, target: str) -> tuple[int, dict[str, Any]]:
    rc, out, err = explain(prom, target, "--output=json")
    assert out, err
    doc: dict[str, Any] = json.loads(out)
    return rc, doc


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_diagnosis(prometheus: str, name: str) -> None:
    sc = SCENARIOS[name]
    rc, doc = explain_json(prometheus, f"{es.NAMESPACE}/{sc.pod}")
    print(f"\n{name}: exit {rc}: {doc['summary']}")
    assert doc["verdict"] == sc.verdict, doc["summary"]
    assert rc == {"healthy": 0, "at_risk": 1}[sc.verdict]
    assert doc["closeness"]["container"] == sc.binding
    growing_kinds = [g["name"] for g in doc["growth"] if g["what"] == "kind"]
    growing_procs = [g["name"] for g in doc["growth"] if g["what"] == "process"]
    causes = [c["code"] for c in doc["causes"]]
    if sc.kind is None:
        assert growing_kinds == [], doc["growth"]
    else:
        assert growing_kinds[:1] == [sc.kind], doc["growth"]
    if sc.process is None:
        assert growing_procs == [], doc["growth"]
    else:
        assert growing_procs[:1] == [sc.process], doc["growth"]
    if sc.cause is None:
        assert causes == [], doc["causes"]
    else:
        assert causes[:1] == [sc.cause], doc["causes"]
    if sc.setting is not None:
        assert sc.setting in doc["causes"][0]["settings"]
    if sc.verdict == "at_risk":
        assert any("runbooks/Headroom" in a for a in doc["actions"]), doc["actions"]
        assert any(a.startswith("a limit of ") for a in doc["actions"]), doc["actions"]


def test_page_cache_growth_is_named_reclaimable(prometheus: str) -> None:
    rc, doc = explain_json(prometheus, f"{es.NAMESPACE}/vllm-cache-0")
    assert rc == 0
    assert [g["name"] for g in doc["growth"]] == ["page cache (reclaimable)"]
    assert "page cache grows" in doc["summary"]


def test_text_output_reads(prometheus: str) -> None:
    rc, out, _ = explain(prometheus, "vllm-engine-0")  # POD alone: one namespace has it
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith("AT RISK llm/vllm-engine-0: limit in ") and len(lines[0]) <= 80
    assert "container vllm" in lines[1] and "EngineCore" in out.split("\n\n")[0]
    # Ready to paste, before anything generic: the real namespace, pod and container.
    assert out.index("\nRun now") < out.index("\nHow close")
    assert "  kubectl -n llm describe pod vllm-engine-0\n" in out
    assert "kubectl -n llm exec vllm-engine-0 -c vllm -- ls -la /dev/shm" in out
    assert "forecast from  computed here: the recording rules are not loaded" in out
    for heading in ("How close", "What grows", "Likely cause", "What to do now"):
        assert f"\n{heading}" in out
    assert "\x1b[" not in out  # no colour when stdout is not a terminal
    rc, out, _ = explain(prometheus, "vllm-engine-0", "--color=always")
    assert "\x1b[1;31m" in out


def test_a_url_without_a_scheme_is_bad_usage() -> None:
    r = subprocess.run([sys.executable, "-m", "exporter.cli", "explain", "llm/x",
                        "--prometheus.url=prometheus:9090"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "the URL needs http://" in r.stderr, r.stderr


def test_an_answer_over_the_cap_is_refused_not_read(tmp_path: Path) -> None:
    """A "Prometheus" that answers 40 MiB: explain stops at the cap, says so
    (docs/threats.md: huge-prometheus-answer)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Huge(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(200)
            self.end_headers()
            chunk = b'{"status":"success","data":{"resultType":"vector","result":[' + (
                b" " * (1 << 20))
            try:
                for _ in range(40):
                    self.wfile.write(chunk)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Huge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rc, _, err = explain(f"http://127.0.0.1:{server.server_address[1]}", "llm/x")
        assert rc == 3 and "answer larger than 32 MiB" in err, err
    finally:
        server.shutdown()
        server.server_close()


def test_no_data(prometheus: str) -> None:
    rc, doc = explain_json(prometheus, "llm/no-such-pod")
    assert rc == 3
    assert doc["verdict"] == "no_data"
    assert doc["summary"].startswith("NO DATA")
    # A pod seen earlier but without series now (deleted, its node gone): no data, and
    # when it was last seen.
    rc, out, _ = explain(prometheus, "llm/vllm-engine-0", f"--time={time.time() + 3600}")
    assert rc == 3 and "NO DATA" in out and "last series at " in out, out
    # A selector that matches nothing is no data too, not a guess.
    rc, out, _ = explain(prometheus, "llm/vllm-engine-0", '--selector=job="other"')
    assert rc == 3 and "NO DATA" in out


def test_judged_in_the_past(prometheus: str) -> None:
    """--time: as of 2 days ago the engine leak had no lasting growth to show yet."""
    rc, doc = explain_json(prometheus, "llm/vllm-engine-0")
    assert rc == 1
    at = time.time() - 2 * 86400
    rc, out, _ = explain(prometheus, "llm/vllm-engine-0", f"--time={at}", "--output=json")
    past = json.loads(out)
    assert past["closeness"]["unreclaimable"] < doc["closeness"]["unreclaimable"]


def test_bad_usage_and_unreachable(prometheus: str) -> None:
    assert explain(prometheus, "llm/")[0] == 2
    assert explain(prometheus, "llm/x", "--time=yesterday")[0] == 2
    rc, _, err = explain(f"http://127.0.0.1:{free_port()}", "llm/x")
    assert rc == 3 and "no data" in err
    r = subprocess.run([sys.executable, "-m", "exporter.cli", "explain", "llm/x"],
                       capture_output=True, text=True, timeout=30,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path.cwd())})
    assert r.returncode == 2 and "--prometheus.url" in r.stderr
