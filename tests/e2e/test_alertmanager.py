"""The shipped Alertmanager configuration on a real Alertmanager: one page per problem.

Alerts are posted to Alertmanager's API the way Prometheus posts them; a webhook stands in
for the pager and the ticket receivers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import alertmanager
from tests.helpers.net import PostReceiver, free_port

ROOT = Path(__file__).resolve().parents[2]
AM = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AMTOOL = shutil.which("amtool")
pytestmark = pytest.mark.prometheus


class Hook(PostReceiver):
    """Records every notification: (receiver path, alerts)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, list[dict[str, Any]]]] = []
        super().__init__()

    def post(self, path: str, body: Any) -> None:
        self.got.append((path, body["alerts"]))

    def names(self, path: str) -> list[tuple[str, str, str]]:
        return sorted((a["labels"]["alertname"], a["labels"].get("pod", ""),
                       a["labels"].get("container", ""))
                      for p, alerts in self.got if p == path for a in alerts)


def test_shipped_file_is_the_config() -> None:
    shipped = yaml.safe_load((ROOT / "alerts" / "alertmanager.yaml").read_text())
    assert shipped == alertmanager.config()
    assert list(alertmanager.artifacts()) == ["alerts/alertmanager.yaml"]
    copy = ROOT / "charts" / "headroom" / "files" / "alertmanager" / "alertmanager.yaml"
    assert copy.read_text() == (ROOT / "alerts" / "alertmanager.yaml").read_text()


@pytest.mark.skipif(AMTOOL is None, reason="amtool is not installed")
def test_amtool_accepts_the_shipped_file() -> None:
    assert AMTOOL is not None
    out = subprocess.run([AMTOOL, "check-config", str(ROOT / "alerts" / "alertmanager.yaml")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture
def am(tmp_path: Path) -> Iterator[tuple[str, Hook]]:
    if AM is None:
        pytest.skip("prometheus-alertmanager is not installed")
    hook = Hook()
    cfg = alertmanager.config(group_wait="1s", group_interval="1s", repeat_interval="1h")
    for r in cfg["receivers"]:
        r["webhook_configs"] = [{"url": f"http://127.0.0.1:{hook.port}/{r['name']}",
                                 "send_resolved": False}]
    (tmp_path / "am.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    proc = subprocess.Popen(
        [AM, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("Alertmanager did not start") from None
                time.sleep(0.1)
        yield url, hook
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        hook.server.shutdown()
        hook.server.server_close()


def _alert(name: str, severity: str, pod: str, container: str = "") -> dict[str, Any]:
    labels = {"alertname": name, "severity": severity, "namespace": "llm", "pod": pod,
              "job": "headroom"}
    if container:  # Prometheus drops the empty container label of the pod level
        labels["container"] = container
    return {"labels": labels, "annotations": {"summary": name}}


def _post(url: str, alerts: list[dict[str, Any]]) -> None:
    req = urllib.request.Request(f"{url}/api/v2/alerts", data=json.dumps(alerts).encode(),
                                 headers={"Content-Type": "application/json"},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200


def _wait_for(hook: Hook, n: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(a) for _, a in hook.got) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2)  # anything else that was going to come


def test_one_page_per_problem_on_a_real_alertmanager(am: tuple[str, Hook]) -> None:
    url, hook = am
    fill, near = "HeadroomMemoryFillingUp", "HeadroomMemoryNearLimit"
    _post(url, [
        # Pod a: paged; its container and pod-level tickets, its NearLimit are muted.
        _alert(fill, "critical", "a", "vllm"),
        _alert(fill, "warning", "a", "vllm"),
        _alert(fill, "warning", "a"),
        _alert("HeadroomMemoryReclaimAtLimit", "warning", "a", "vllm"),
        _alert(near, "critical", "a", "vllm"),
        # ... but not the kill report.
        _alert("HeadroomPodOOMKilled", "warning", "a"),
        # Pod b: only a ticket, nothing mutes it.
        _alert(fill, "warning", "b", "vllm"),
        # Pod c: the container and the pod level both page: one group, one notification.
        _alert(fill, "critical", "c", "vllm"),
        _alert(fill, "critical", "c"),
    ])
    _wait_for(hook, 5)
    assert hook.names(f"/{alertmanager.PAGER}") == [(fill, "a", "vllm"), (fill, "c", ""),
                                                    (fill, "c", "vllm")]
    assert hook.names(f"/{alertmanager.TICKETS}") == [(fill, "b", "vllm"),
                                                      ("HeadroomPodOOMKilled", "a", "")]
    pages = [alerts for p, alerts in hook.got if p == f"/{alertmanager.PAGER}"]
    assert sorted(len(a) for a in pages) == [1, 2], "pod c's two alerts in one notification"

    # Alertmanager itself reports the muted ones as inhibited by pod a's page.
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as r:
        states = {(a["labels"]["alertname"], a["labels"]["severity"], a["labels"]["pod"],
                   a["labels"].get("container", "")): a["status"] for a in json.load(r)}
    for key in [(fill, "warning", "a", "vllm"), (fill, "warning", "a", ""),
                ("HeadroomMemoryReclaimAtLimit", "warning", "a", "vllm"),
                (near, "critical", "a", "vllm")]:
        assert states[key]["state"] == "suppressed", key
        assert states[key]["inhibitedBy"], key
    assert states[(fill, "warning", "b", "vllm")]["state"] == "active"
