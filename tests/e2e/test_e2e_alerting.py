"""Tier 5, for real: ``headroom serve`` on a real cgroup tree, a real Prometheus (1 s
scrape and evaluation, the shipped rules with every window shrunk by one factor) and a
real Alertmanager running the shipped routing and inhibition (``alerts/alertmanager.yaml``)
with webhook receivers. A process beneath the test's own cgroup grows toward its pod's
limit; the critical page must reach the webhook before the kernel kills it. As soon as it
has, the exporter is restarted: the page must neither resolve nor be sent again. After the
kill the flight-recorder document must exist and name the victim. Then every dashboard
query runs against that Prometheus and must return data, except the panels listed (with
their reason) in ``dashboards.MAY_BE_EMPTY``. The raw series of the run are saved when
``HEADROOM_RECORD_E2E`` names a file (the replay fixture in ``alerts/scenarios/fixtures``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import dashboards
from alerts import alertmanager
from alerts.generate import rules_yaml
from exporter.promql import CONFIG
from tests.helpers.kernel import Grower, kube_tree
from tests.helpers.net import PostReceiver, free_port, stop_all, wait_http
from tests.helpers.stack import need_kernel_and, prometheus_yml, serve_on_tree, start_prometheus
from tests.unit.test_dashboards import substitute_var

pytestmark = [pytest.mark.prometheus, pytest.mark.kernel]

MiB = 1 << 20
SCALE = 240  # 1 h -> 15 s, 1 d -> 6 min: the relations between windows are kept
# The gap tolerance is counted in scrapes, not in ramp time: 10 min of 30 s scrapes is 20
# scrapes, 20 s at this test's 1 s scrape; an exporter restart takes a few seconds.
RULES = CONFIG.scaled(SCALE).replace(hold_s=20, keep_firing_s=30)
LIMIT = 192 * MiB
STEP_MIB, STEP_MS = 1, 400  # 2.5 MiB/s: about a minute from start to the limit


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


class Webhook(PostReceiver):
    """Alertmanager's webhook receivers: records (monotonic time, alert) pairs of firing
    notifications, and the resolved ones apart."""

    def __init__(self) -> None:
        self.received: list[tuple[float, dict[str, Any]]] = []
        self.resolved: list[tuple[float, dict[str, Any]]] = []
        super().__init__()

    def post(self, path: str, body: Any) -> None:
        now = time.monotonic()
        for alert in body.get("alerts", []):
            if alert.get("status") == "firing":
                self.received.append((now, alert))
            else:
                self.resolved.append((now, alert))

    def first(self, severity: str) -> tuple[float, dict[str, Any]] | None:
        hits = [(t, a) for t, a in self.received if a["labels"].get("severity") == severity
                and a["labels"]["alertname"] != "HeadroomPodOOMKilled"]
        return min(hits, key=lambda h: h[0]) if hits else None


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    need_kernel_and("prometheus", "prometheus-alertmanager")
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
            exporter_args = serve_on_tree(tree, exporter_port, tmp_path / "oom",
                                          "--log.format=json")
            exporter = subprocess.Popen(exporter_args, stderr=log_file("exporter.log"))
            procs.append(exporter)
            # The shipped routing and inhibition, with this test's receivers and timing.
            am_cfg = alertmanager.config(group_wait="1s", group_interval="1s",
                                         repeat_interval="1h")
            for r in am_cfg["receivers"]:
                r["webhook_configs"] = [{"url": f"http://127.0.0.1:{webhook.port}/",
                                         "send_resolved": True}]
            (tmp_path / "am.yml").write_text(yaml.safe_dump(am_cfg))
            am = subprocess.Popen(
                ["prometheus-alertmanager", f"--config.file={tmp_path / 'am.yml'}",
                 f"--storage.path={tmp_path / 'am'}",
                 f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
                stdout=subprocess.DEVNULL, stderr=log_file("am.log"),
            )
            procs.append(am)
            (tmp_path / "rules.yaml").write_text(rules_yaml(RULES))
            config = prometheus_yml(f"127.0.0.1:{exporter_port}", rules=tmp_path / "rules.yaml",
                                    alertmanager=f"127.0.0.1:{am_port}")
            prom = start_prometheus(tmp_path, prom_port, config,
                                    stderr=log_file("prometheus.log"))
            procs.append(prom)
            wait_http(f"http://127.0.0.1:{exporter_port}/healthz", exporter)
            wait_http(f"http://127.0.0.1:{am_port}/-/ready", am)
            wait_http(f"http://127.0.0.1:{prom_port}/-/ready", prom)
            def restart_exporter() -> float:
                """Stop the exporter and start a new one on the same address; returns
                how long no exporter answered."""
                old = procs[0]
                down = time.monotonic()
                old.send_signal(signal.SIGTERM)
                old.wait(timeout=10)
                new = subprocess.Popen(exporter_args, stderr=log_file("exporter-2.log"))
                procs[0] = new
                wait_http(f"http://127.0.0.1:{exporter_port}/healthz", new)
                return time.monotonic() - down

            yield {"tree": tree, "prom": f"http://127.0.0.1:{prom_port}",
                   "exporter": f"http://127.0.0.1:{exporter_port}", "webhook": webhook,
                   "tmp": tmp_path, "restart_exporter": restart_exporter}
        finally:
            stop_all(procs)
            webhook.server.shutdown()
            webhook.server.server_close()
            for f in files:
                f.close()


def save_replay(path: Path, prom: str, start: float, killed: float, pod: str) -> None:
    """The run's raw exporter series, 1 s apart, for ``alerts/scenarios`` to replay through
    the rules (only what the rules read: headroom's series and ``up``)."""
    body = query_range(prom, '{job="headroom", __name__=~"headroom_.*|up"}',
                       math.floor(start), math.floor(killed))
    series = [{"metric": r["metric"], "values": [[int(t) - math.floor(start), v]
                                                 for t, v in r["values"]]}
              for r in body["data"]["result"]]
    path.write_text(json.dumps({
        "about": "recorded by tests/e2e/test_e2e_alerting.py (HEADROOM_RECORD_E2E): a real "
                 "exporter scraped every second while a process grew to its OOM kill; "
                 "the exporter restarted once the page was in",
        "scale": SCALE, "step_s": 1, "kill_s": math.floor(killed) - math.floor(start),
        "pod": pod, "series": series}, indent=None, separators=(",", ":")) + "\n")


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
        # As soon as the page is in, restart the exporter (a DaemonSet pod restarting).
        restarted = down_s = None
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and g.proc.poll() is None:
            if restarted is None and webhook.first("critical") is not None:
                # The ramp holds while no exporter watches: on a busy machine the restart
                # can take as long as the page's lead, and a kill before the new exporter's
                # first read is history to it (by design), so no document would come.
                os.kill(g.proc.pid, signal.SIGSTOP)
                try:
                    down_s = stack["restart_exporter"]()
                finally:
                    os.kill(g.proc.pid, signal.SIGCONT)
                restarted = time.monotonic()
            time.sleep(0.05)
        rc = g.wait(timeout=10)
        killed = time.monotonic()
        killed_wall = time.time()
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

    # The exporter restart while the page was on: no resolve, no second notification.
    assert restarted is not None and down_s is not None, "the page came, the restart too"
    pages = [(t, a) for t, a in webhook.received if a["labels"]["severity"] == "critical"]
    before_kill = [(t, a) for t, a in pages if t < killed]
    resolved = [(t, a) for t, a in webhook.resolved
                if a["labels"]["severity"] == "critical" and t < killed]
    print(f"exporter down {down_s:.1f} s while paged; critical notifications before the "
          f"kill: {len(before_kill)} "
          f"({sorted({a['labels']['alertname'] for _, a in before_kill})}); "
          f"resolved before the kill: {len(resolved)}")
    assert len(before_kill) == 1, f"one page, once: {before_kill}"
    assert not resolved, f"the restart resolved the page: {resolved}"
    # One incident, counted through the shipped grouping and inhibition: the kill and
    # its report do not page again and again.
    assert len(pages) <= 3, f"pager notifications for one incident: {pages}"
    # The page says when, where and what grows.
    text = page[1]["annotations"]["description"]
    assert "horizon binds" in text and "What grows:" in text, text
    assert f"/{uid}" in text, text  # the binding cgroup: "container C of pod NS/POD"

    record = os.environ.get("HEADROOM_RECORD_E2E")
    if record:
        save_replay(Path(record), prom, scenario_start, killed_wall, uid)

    # The post-mortem: the flight recorder named the victim and kept the climb.
    deadline = time.monotonic() + 60  # a deadline for a busy machine, not a claim
    while not (docs := list((stack["tmp"] / "oom").glob("*.json"))) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(docs) == 1, docs
    doc = json.loads(docs[0].read_text())
    assert doc["victim"]["process"] == os.path.basename(sys.executable)
    assert doc["pod"] == uid
    assert max(v for _, v in doc["usage"]) >= 0.9 * LIMIT
    with urllib.request.urlopen(f"{stack['exporter']}/debug/oom/", timeout=5) as r:
        assert json.load(r)["documents"] == [f"/debug/oom/{docs[0].name}"]
    while not (kills := query(prom, f'headroom_oom_kills_total{{pod="{uid}"}}')["data"][
            "result"]) and time.monotonic() < deadline:
        time.sleep(0.5)
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
