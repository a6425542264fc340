"""The command line: flags and env twins, one message naming every problem, exit 2;
and ``headroom serve`` started for real, as a new user would."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.assembly.config import ConfigError, build_config
from exporter.assembly.registry import SOURCES
from exporter.cli import build_parser, main
from exporter.collectors.kube.pods import KubernetesSettings
from exporter.collectors.procfs import ProcfsSettings
from exporter.contract.settings import env_name, parse_duration, parse_size
from tests.conftest import HOSTS
from tests.helpers.net import free_port, wait_http

V1 = HOSTS / "v1-cgroupfs-containerd"


def config(argv: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    ns, unknown = build_parser().parse_known_args(["serve", *argv])
    assert not unknown
    return build_config(ns, env or {})


def test_defaults() -> None:
    c = config([])
    assert c.web.listen == ("", 9847)
    assert c.sampler.interval == 0.2 and c.sampler.window == 30.0
    assert c.settings(ProcfsSettings).pss_max_rss == 2 << 30
    assert c.collectors == {s.name for s in SOURCES if s.default_enabled}
    assert c.collectors >= {"cgroup", "procfs", "tmpfs", "nvml", "vllm", "kubernetes"}


def test_env_twins_and_flags_win() -> None:
    env = {"HEADROOM_SAMPLER_WINDOW": "15s", "HEADROOM_CGROUP_TRACK": "a.slice,/b/c",
           "HEADROOM_COLLECTOR_NVML": "false", "NODE_NAME": "gpu-node-7",
           "HEADROOM_WEB_LISTEN_ADDRESS": "127.0.0.1:1"}
    c = config(["--web.listen-address=[::1]:9000"], env)
    assert c.sampler.window == 15.0
    assert c.discovery.track == ("a.slice", "/b/c")
    assert "nvml" not in c.collectors
    assert c.settings(KubernetesSettings).node_name == "gpu-node-7"
    assert c.web.listen == ("::1", 9000)
    assert not config(["--no-collector.procfs"]).enabled("procfs")
    assert env_name("--procfs.pss-max-rss") == "HEADROOM_PROCFS_PSS_MAX_RSS"


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        config(["--sampler.interval=5s", "--log.level=loud", "--procfs.pss-max-rss=big",
                "--path.procfs=/nonexistent"], {"HEADROOM_COLLECTOR_TMPFS": "maybe"})
    text = str(err.value)
    for part in ("--sampler.interval", "--log.level", "--procfs.pss-max-rss",
                 "--path.procfs", "HEADROOM_COLLECTOR_TMPFS"):
        assert part in text


def test_bad_flags_exit_2_with_one_message(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["serve", "--no-such-flag", "--sampler.window=soon", "--log.format=xml"], env={})
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("bad configuration") == 1
    for part in ("--no-such-flag", "--sampler.window", "--log.format"):
        assert part in err


@pytest.mark.parametrize(("text", "seconds"), [("200ms", 0.2), ("30s", 30), ("5m", 300),
                                               ("1h", 3600), ("2", 2), ("1m30s", 90)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "1m30", "s", "-1s", "1 s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_kmsg_can_be_turned_off() -> None:
    assert config(["--path.kmsg="]).paths.kmsg is None
    assert config([]).paths.kmsg == Path("/dev/kmsg")


def test_parse_size() -> None:
    assert parse_size("2GiB") == 2 << 30 and parse_size("512MiB") == 512 << 20
    assert parse_size("1048576") == 1 << 20 and parse_size("1GB") == 10**9


def get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.status, r.headers["Content-Type"], r.read().decode()


@pytest.fixture
def served() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter.cli", "serve", f"--web.listen-address=127.0.0.1:{port}",
         f"--path.procfs={V1 / 'proc'}", f"--path.cgroupfs={V1 / 'sys/fs/cgroup'}",
         "--no-collector.kubernetes", "--no-collector.nvml", "--no-collector.vllm"],
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    # A generous deadline, not a claim: how fast it starts is benchmarks/serve_ready.py's.
    wait_http(url + "/healthz", proc, timeout=120)
    yield url, proc
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.stderr is not None
    proc.stderr.close()


def test_serve_answers_metrics_healthz_landing(
        served: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, _ = served
    status, ctype, body = get(url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert 'headroom_collector_success{collector="cgroup"} 1' in body
    assert "headroom_build_info{version=" in body
    req = urllib.request.Request(url + "/metrics",
                                 headers={"Accept": "application/openmetrics-text"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        assert r.read().decode().rstrip().endswith("# EOF")
    assert get(url + "/healthz")[2] == "ok\n"
    assert "/metrics" in get(url + "/")[2]


def test_serve_exits_cleanly_on_sigterm(
        served: tuple[str, subprocess.Popen[bytes]]) -> None:
    _, proc = served
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert proc.stderr is not None
    assert b"shutting down" in proc.stderr.read()


def test_port_in_use_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = subprocess.run(
            [sys.executable, "-m", "exporter.cli", "serve",
             f"--web.listen-address=127.0.0.1:{port}", f"--path.procfs={V1 / 'proc'}",
             f"--path.cgroupfs={V1 / 'sys/fs/cgroup'}", "--no-collector.kubernetes"],
            capture_output=True, timeout=120, env={**os.environ, "HEADROOM_LOG_FORMAT": "json"},
        )
    assert res.returncode == 1
    lines = [line for line in res.stderr.decode().splitlines() if "cannot serve" in line]
    assert len(lines) == 1 and '"level": "error"' in lines[0]
