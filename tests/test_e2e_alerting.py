"""Tier 5, for real: ``headroom serve`` on a real cgroup tree, a real Prometheus (1 s
scrape and evaluation, the shipped rules with every window shrunk by one factor) and a
real Alertmanager with a webhook receiver. A process beneath the test's own cgroup grows
toward its pod's limit; the critical page must reach the webhook before the kernel kills
it; after the kill the flight-recorder document must exist and name the victim. Then every
dashboard query runs against that Prometheus and must return data, except the panels
listed (with their reason) in ``dashboards.MAY_BE_EMPTY``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import dashboards
from alerts.config import DEFAULT
from alerts.generate import rules_yaml
from tests.kernel import Grower, KernelUnavailable, kube_tree, own_memory_cgroup
from tests.test_dashboards import substitute_var

pytestmark = [pytest.mark.prometheus, pytest.mark.kernel]

MiB = 1 << 20
SCALE = 360  # 1 h -> 10 s, 1 d -> 4 min: the relations between windows are kept
LIMIT = 192 * MiB
STEP_MIB, STEP_MS = 1, 400  # 2.5 MiB/s: about a minute from start to the limit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")


def query(prom: str, expr: str) -> dict[str, Any]:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{prom}/api/v1/query?{q}", timeout=10) as r:
        body: dict[str, Any] = json.load(r)
    return body


def query_range(prom: str, expr: str, start: float, end: float) -> dict[str, Any]:
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": "1s"})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{q}", timeout=30) as r:
        body: dict[str, Any] = json.load(r)
    return body


class Webhook:
    """Alertmanager's webhook receiver: records (monotonic time, alert) pairs."""

    def __init__(self) -> None:
        self.received: list[tuple[float, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                now = time.monotonic()
                for alert in body.get("alerts", []):
                    if alert.get("status") == "firing":
                        outer.received.append((now, alert))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def first(self, severity: str) -> tuple[float, dict[str, Any]] | None:
        hits = [(t, a) for t, a in self.received if a["labels"].get("severity") == severity
                and a["labels"]["alertname"] != "HeadroomPodOOMKilled"]
        return min(hits, key=lambda h: h[0]) if hits else None


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    try:
        own_memory_cgroup()
    except KernelUnavailable as exc:
        pytest.skip(str(exc))
    for binary in ("prometheus", "prometheus-alertmanager"):
        if shutil.which(binary) is None:
            pytest.skip(f"{binary} not installed (scripts/test.sh installs it)")
    procs: list[subprocess.Popen[bytes]] = []
    files: list[Any] = []
    webhook = Webhook()

    def log_file(name: str) -> Any:
        f = (tmp_path / "logs" / name).open("wb")
        files.append(f)
        return f

    with kube_tree() as tree:
        try:
            exporter_port, prom_port, am_port = free_port(), free_port(), free_port()
            logs = tmp_path / "logs"
            logs.mkdir()
            exporter = subprocess.Popen(
                [sys.executable, "-m", "exporter.cli", "serve",
                 f"--web.listen-address=127.0.0.1:{exporter_port}",
                 f"--cgroup.kubepods-path={tree.kubepods}", "--no-collector.kubernetes",
                 "--no-collector.nvml", "--no-collector.vllm", "--sampler.window=1s",
                 f"--flight-recorder.dir={tmp_path / 'oom'}", "--log.format=json"],
                stderr=log_file("exporter.log"),
            )
            procs.append(exporter)
            (tmp_path / "am.yml").write_text(
                "route:\n  receiver: hook\n  group_by: [alertname, severity]\n"
                "  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n"
                "receivers:\n- name: hook\n  webhook_configs:\n"
                f"  - url: http://127.0.0.1:{webhook.port}/\n    send_resolved: false\n")
            am = subprocess.Popen(
                ["prometheus-alertmanager", f"--config.file={tmp_path / 'am.yml'}",
                 f"--storage.path={tmp_path / 'am'}",
                 f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
                stdout=subprocess.DEVNULL, stderr=log_file("am.log"),
            )
            procs.append(am)
            (tmp_path / "rules.yaml").write_text(rules_yaml(DEFAULT.scaled(SCALE)))
            (tmp_path / "prometheus.yml").write_text(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                f"rule_files: [{tmp_path / 'rules.yaml'}]\n"
                "alerting:\n  alertmanagers:\n  - static_configs:\n"
                f"    - targets: ['127.0.0.1:{am_port}']\n"
                "scrape_configs:\n- job_name: headroom\n  static_configs:\n"
                f"  - targets: ['127.0.0.1:{exporter_port}']\n")
            prom = subprocess.Popen(
                ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                stdout=subprocess.DEVNULL, stderr=log_file("prometheus.log"),
            )
            procs.append(prom)
            wait_http(f"http://127.0.0.1:{exporter_port}/healthz", exporter)
            wait_http(f"http://127.0.0.1:{am_port}/-/ready", am)
            wait_http(f"http://127.0.0.1:{prom_port}/-/ready", prom)
            yield {"tree": tree, "prom": f"http://127.0.0.1:{prom_port}",
                   "exporter": f"http://127.0.0.1:{exporter_port}", "webhook": webhook,
                   "tmp": tmp_path}
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
            webhook.server.shutdown()
            webhook.server.server_close()
            for f in files:
                f.close()


def test_critical_page_arrives_before_the_oom_kill(stack: dict[str, Any]) -> None:
    tree, prom, webhook = stack["tree"], stack["prom"], stack["webhook"]
    uid, pod = tree.pod(limit=LIMIT)
    cid, container = tree.container(pod)
    shm = Path("/dev/shm") / f"headroom-e2e-{cid[:8]}"
    tree.shm_files.append(shm)
    scenario_start = time.time()
    g = Grower(tree.hierarchy, container)
    try:
        # Some shmem nobody maps (the 3 AM kind) and page cache first, then an anon ramp.
        g.send(f"shm 24 {shm.name}")
        # Let Prometheus see the pod before it grows: the rules need a few samples.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = query(prom, f'headroom_memory_usage_bytes{{pod="{uid}",container=""}}')
            if r["data"]["result"]:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("Prometheus never scraped the pod")
        time.sleep(5)
        started = time.monotonic()
        g.send(f"grow {STEP_MIB} {STEP_MS}", wait=False)
        rc = g.wait(timeout=240)
        killed = time.monotonic()
    finally:
        g.close()
    assert rc == -9, "the kernel's OOM killer ends the grower"
    time.sleep(3)  # let the kill reach the exporter, Prometheus and the webhook
    page = webhook.first("critical")
    ticket = webhook.first("warning")
    assert page is not None, f"no critical page; received: {webhook.received}"
    lead = killed - page[0]
    print(f"\nramp {killed - started:.1f} s to the kill; critical "
          f"{page[1]['labels']['alertname']} at {lead:.1f} s before it"
          + (f"; warning {ticket[1]['labels']['alertname']} "
             f"{killed - ticket[0]:.1f} s before" if ticket else ""))
    assert page[0] < killed, "the page must arrive before the kill"
    assert page[1]["labels"]["pod"] == uid
    assert page[1]["annotations"]["runbook_url"].endswith(".md")

    # The post-mortem: the flight recorder named the victim and kept the climb.
    docs = list((stack["tmp"] / "oom").glob("*.json"))
    assert len(docs) == 1, docs
    doc = json.loads(docs[0].read_text())
    assert doc["victim"]["process"] == os.path.basename(sys.executable)
    assert doc["pod"] == uid
    assert max(v for _, v in doc["usage"]) >= 0.9 * LIMIT
    with urllib.request.urlopen(f"{stack['exporter']}/debug/oom/", timeout=5) as r:
        assert json.load(r)["documents"] == [f"/debug/oom/{docs[0].name}"]
    kills = query(prom, f'headroom_oom_kills_total{{pod="{uid}"}}')["data"]["result"]
    assert kills and kills[0]["metric"]["process"] == os.path.basename(sys.executable)

    # Every dashboard panel returns data over this real run (a panel with several
    # queries, e.g. one per kind, needs one of them to), unless it is listed with a reason.
    has_data: dict[tuple[str, str], bool] = {}
    end = time.time()
    for uid_, title, expr in dashboards.queries():
        body = query_range(prom, substitute_var(expr), scenario_start, end)
        assert body["status"] == "success", (title, body)
        key = (uid_, title)
        has_data[key] = has_data.get(key, False) or bool(body["data"]["result"])
    empty = sorted(f"{u} / {t}" for (u, t), ok in has_data.items()
                   if not ok and t not in dashboards.MAY_BE_EMPTY)
    print(f"{sum(has_data.values())} of {len(has_data)} panels returned data; empty and "
          f"listed in MAY_BE_EMPTY: {sorted(t for (u, t), ok in has_data.items() if not ok)}")
    assert not empty, "panels without data:\n" + "\n".join(empty)
