"""``headroom explain`` against a real Prometheus behind TLS and basic auth (its
``--web.config.file``: exporter-toolkit, the format headroom's own web config uses).
Certificates are made by ``openssl`` for this test; the password is bcrypt-hashed."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_e2e_alerting import free_port

pytestmark = pytest.mark.prometheus
try:
    import bcrypt
except ImportError:  # skipped, or failed with HEADROOM_REQUIRE_ONCALL_TOOLS=1 (as CI should)
    if os.environ.get("HEADROOM_REQUIRE_ONCALL_TOOLS") == "1":
        raise
    pytest.skip("bcrypt not installed (pip install bcrypt)", allow_module_level=True)


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    for binary in ("prometheus", "openssl"):
        if shutil.which(binary) is None:
            pytest.skip(f"{binary} not installed")
    d = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=headroom test CA", "-keyout", str(d / "ca.key"),
            "-out", str(d / "ca.crt"))
    for name, cn in (("server", "127.0.0.1"), ("client", "explain")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"))
        (d / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1\n" if name == "server"
                                       else "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"),
                "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2",
                "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.crt"))
    (d / "password").write_text("s3cret\n")
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    (d / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {d / 'server.crt'}\n  key_file: {d / 'server.key'}\n"
        f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {d / 'ca.crt'}\n"
        f"basic_auth_users:\n  oncall: {hashed}\n")
    (d / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={d / 'prometheus.yml'}",
         f"--storage.tsdb.path={d / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
         f"--web.config.file={d / 'web.yml'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"https://127.0.0.1:{port}"
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{url}/-/ready", context=ctx, timeout=1)
            except urllib.error.HTTPError:  # 401: up, and asking for the password
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError("prometheus exited") from None
                subprocess.run(["sleep", "0.1"], check=True)
        yield url, d
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def explain(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter.cli", "explain", "llm/vllm-0",
                           f"--prometheus.url={url}", *args],
                          capture_output=True, text=True, timeout=60)


def test_tls_and_basic_auth(secured: tuple[str, Path]) -> None:
    url, d = secured
    auth = ["--prometheus.username=oncall", f"--prometheus.password-file={d / 'password'}"]
    ok = explain(url, f"--prometheus.ca-file={d / 'ca.crt'}", *auth)
    # Prometheus answered every query: the pod has no series, so "no data" on stdout.
    assert ok.returncode == 3 and "NO DATA" in ok.stdout, ok.stderr
    with_client_cert = explain(url, f"--prometheus.ca-file={d / 'ca.crt'}", *auth,
                               f"--prometheus.cert-file={d / 'client.crt'}",
                               f"--prometheus.key-file={d / 'client.key'}")
    assert with_client_cert.returncode == 3 and "NO DATA" in with_client_cert.stdout
    skip = explain(url, "--prometheus.insecure-skip-verify", *auth)
    assert skip.returncode == 3 and "NO DATA" in skip.stdout, skip.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--prometheus.username=oncall"], "Unauthorized"),  # no password
    ([], "Unauthorized"),
    (["--prometheus.insecure-skip-verify=x"], ""),  # bad usage: argparse refuses
])
def test_refusals_are_no_data_not_a_guess(secured: tuple[str, Path], args: list[str],
                                          message: str) -> None:
    url, d = secured
    r = explain(url, f"--prometheus.ca-file={d / 'ca.crt'}", *args)
    if not message:
        assert r.returncode == 2
        return
    assert r.returncode == 3 and r.stdout == ""
    assert "no data" in r.stderr and message in r.stderr, r.stderr


def test_unverified_certificate_is_refused(secured: tuple[str, Path]) -> None:
    url, d = secured
    r = explain(url, "--prometheus.username=oncall",
                f"--prometheus.password-file={d / 'password'}")
    assert r.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in r.stderr, r.stderr
