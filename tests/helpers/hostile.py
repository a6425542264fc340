"""Helpers for the hostile-input tests: a real ``headroom serve`` process, test PKI made
with the openssl command, raw sockets."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.postmortem.docdir import DocumentDir
from tests.conftest import HOSTS
from tests.helpers.net import free_port

# Under the v2 guest's software emulation (scripts/v2-guest.py sets HEADROOM_GUEST) starting
# Python is 30-70x slower: waits for the exporter scale by this factor there, not here.
SLOW = 10.0 if os.environ.get("HEADROOM_GUEST") else 1.0

V1 = HOSTS / "v1-cgroupfs-containerd"
FIXTURE_ARGS = (f"--path.procfs={V1 / 'proc'}", f"--path.cgroupfs={V1 / 'sys/fs/cgroup'}",
                "--no-collector.kubernetes", "--no-collector.nvml", "--no-collector.vllm",
                "--path.kmsg=")


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    scheme: str = "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def wait_port(port: int, timeout: float = 15.0, proc: subprocess.Popen[bytes] | None = None
              ) -> None:
    deadline = time.monotonic() + timeout * SLOW
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exporter exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("exporter did not listen in time")


@contextmanager
def serve(args: Sequence[str], tmp: Path, env: dict[str, str] | None = None,
          scheme: str = "http", prefix: Sequence[str] = ()) -> Iterator[Served]:
    """``headroom serve`` on a free loopback port; stopped with SIGTERM afterwards."""
    port = free_port()
    log = tmp / f"exporter-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "exporter.cli", "serve",
             f"--web.listen-address=127.0.0.1:{port}", *args],
            stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]),
                 **(env or {})},
        )
    try:
        wait_port(port, proc=proc)
        yield Served(proc, port, log, scheme)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def http_get(url: str, headers: dict[str, str] | None = None,
             context: ssl.SSLContext | None = None, timeout: float = 10.0
             ) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout * SLOW, context=context) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


# --- a test PKI ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_client_cert: Path  # signed by another CA
    other_client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _issue(d: Path, name: str, ca: str, subject: str, san: str) -> None:
    (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "2", "-out", f"{name}.crt",
             "-extfile", f"{name}.ext", cwd=d)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
             "-subj", f"/CN={name}", cwd=d)


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "other-ca")
    _issue(d, "server", "ca", "/CN=headroom", "IP:127.0.0.1,DNS:localhost")
    _issue(d, "client", "ca", "/CN=prometheus", "DNS:prometheus.monitoring.svc")
    _issue(d, "intruder", "other-ca", "/CN=intruder", "DNS:prometheus.monitoring.svc")
    return Pki(d, d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt",
               d / "client.key", d / "intruder.crt", d / "intruder.key")


def reissue_server(pki: Pki) -> None:
    """A new server certificate under the same names (certificate rotation)."""
    _issue(pki.dir, "server", "ca", "/CN=headroom-rotated", "IP:127.0.0.1,DNS:localhost")


def client_context(pki: Pki, cert: bool = False, intruder: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert:
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    if intruder:
        ctx.load_cert_chain(str(pki.other_client_cert), str(pki.other_client_key))
    return ctx


def bcrypt_hash(password: str, cost: int = 10) -> str:
    import bcrypt

    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def basic(user: str, password: str) -> dict[str, str]:
    import base64

    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def big_document(i: int) -> dict[str, Any]:
    """A flight-recorder document with a 15-minute history: about 400 kB of JSON."""
    scrapes = [{"time": 1.8e9 - 900 + t, "usage": t << 20, "limit": 1 << 30,
                "processes": [{"process": f"proc-{p}", "count": 1, "rss_anon": p << 20,
                               "rss_file": 0, "rss_shmem": 0} for p in range(20)]}
               for t in range(0, 900, 5)]
    return {"kind": "headroom.oom_kill/v1", "time": 1.8e9 + i, "namespace": "llm",
            "pod": f"vllm-{i}", "container": "vllm",
            "victim": {"process": "EngineCore", "pid": 42, "source": "kmsg"},
            "usage": [[1.8e9 - 900 + t, t << 20] for t in range(900)], "scrapes": scrapes}


def write_big_documents(docs: Path, n: int = 50) -> None:
    """``n`` of ``big_document`` in ``docs``, named as the flight recorder names them."""
    d = DocumentDir(docs)
    for i in range(n):
        d.write(f"20270115T08{i // 60:02d}{i % 60:02d}Z-llm-vllm-{i}-vllm-000.json",
                json.dumps(big_document(i)).encode())


def raise_nofile(n: int) -> None:
    """This process's open-file limit to at least ``n`` (as far as the hard limit goes)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


@contextmanager
def idle_connections(port: int, n: int = 1000) -> Iterator[list[socket.socket]]:
    """Up to ``n`` connections to 127.0.0.1:``port`` that send nothing (fewer once one is
    refused or reset: the exporter defending itself), closed on exit."""
    idle: list[socket.socket] = []
    try:
        for _ in range(n):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        yield idle
    finally:
        for sock in idle:
            sock.close()
