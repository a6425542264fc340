"""``--web.config.file`` (exporter-toolkit format): validation, TLS with real clients and
a real Prometheus, basic auth, headers, client certificates, reload on SIGHUP
(docs/threats.md: sighup)."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.web.auth import BasicAuth, TokenBucket, parse_basic
from exporter.web.webconfig import WebConfigError, load_web_config, parse_web_config
from tests.helpers.hostile import (
    FIXTURE_ARGS,
    basic,
    bcrypt_hash,
    client_context,
    free_port,
    http_get,
    idle_connections,
    make_pki,
    raise_nofile,
    reissue_server,
    serve,
    wait_port,
)

HASH = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_every_problem_is_named(tmp_path: Path) -> None:
    text = f"""
tls_server_config:
  cert_file: missing.crt
  client_auth_type: RequireAnyClientCert
  min_version: TLS14
  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]
  curve_preferences: [X25519]
  bogus: 1
http_server_config:
  headers:
    X-Frame-Options: allow
    Server: headroom
basic_auth_users:
  alice: plaintext
  "bob:x": {HASH}
rate_limit: {{interval: soon, burst: 1}}
extra: 1
"""
    with pytest.raises(WebConfigError) as err:
        parse_web_config(text, tmp_path)
    joined = "\n".join(err.value.problems)
    for part in ("cannot read", "missing one of key", "RequireAnyClientCert", "TLS14",
                 "TLS_RSA_WITH_RC4_128_SHA", "curve_preferences", "'bogus'",
                 "X-Frame-Options", "'Server'", "alice", "bob:x", "rate_limit.interval",
                 "'extra'"):
        assert part in joined, part
    assert len(err.value.problems) >= 13


def test_duplicate_keys_and_bad_yaml_are_refused(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="duplicate key"):
        parse_web_config(f"basic_auth_users:\n  a: {HASH}\n  a: {HASH}\n", tmp_path)
    with pytest.raises(WebConfigError, match="not valid YAML"):
        parse_web_config("basic_auth_users: [\n", tmp_path)
    assert parse_web_config("", tmp_path).tls is None  # an empty file: plain HTTP, no auth


def test_relative_files_are_read_beside_the_config(pki, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (pki.dir / "web.yml").write_text(
        "tls_server_config: {cert_file: server.crt, key_file: server.key,\n"
        "  client_ca_file: ca.crt, client_auth_type: RequireAndVerifyClientCert}\n")
    cfg = load_web_config(pki.dir / "web.yml")
    assert cfg.tls is not None and cfg.tls.verify_mode == ssl.CERT_REQUIRED
    # A key that does not belong to the certificate is found at start, not at a handshake.
    (tmp_path / "web.yml").write_text(
        f"tls_server_config: {{cert_file: {pki.server_cert}, key_file: {pki.client_key}}}\n")
    with pytest.raises(WebConfigError, match="cannot load the certificate"):
        load_web_config(tmp_path / "web.yml")


def test_bad_web_config_exits_2_naming_the_file(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text("basic_auth_users: {alice: secret}\ntls_server_config: {key_file: k}\n")
    rc = main(["serve", f"--web.config.file={cfg}", *FIXTURE_ARGS], env={})
    err = capsys.readouterr().err
    assert rc == 2
    assert "--web.config.file" in err and "alice" in err and "cert_file" in err
    rc = main(["serve", f"--web.config.file={tmp_path / 'absent.yml'}", *FIXTURE_ARGS], env={})
    assert rc == 2 and "cannot read" in capsys.readouterr().err


def test_basic_auth_caches_verdicts_and_treats_unknown_users_alike() -> None:
    auth = BasicAuth({"prometheus": bcrypt_hash("s3cret", cost=4).encode()}, cache_size=2,
                     bad_cache_size=2)
    good, wrong = basic("prometheus", "s3cret")["Authorization"], basic(
        "prometheus", "nope")["Authorization"]
    assert auth.cached(good) is None  # unknown until bcrypt has run once
    assert auth.check(good) is True and auth.cached(good) is True
    assert auth.check(wrong) is False and auth.cached(wrong) is False
    assert auth.check(basic("mallory", "s3cret")["Authorization"]) is False
    assert auth.cached(good) is True  # bad verdicts are kept apart
    for i in range(3):
        auth.check(basic("prometheus", f"wrong-{i}")["Authorization"])
    assert auth.cached(wrong) is None  # bounded: the least recently used went
    for bad in (None, "", "Bearer x", "Basic !!!", "Basic " + "A" * 5000, "Basic Zm9v"):
        assert auth.check(bad) is False and auth.cached(bad) is False
    assert parse_basic("basic YTpiOmM=") == ("a", b"b:c")  # the password may hold colons
    # No password is kept: the cache holds HMAC digests only.
    assert all(b"s3cret" not in k for k in [*auth._good, *auth._bad])


def test_token_bucket() -> None:
    now = [0.0]
    bucket = TokenBucket(1.0, 2, clock=lambda: now[0])
    assert [bucket.allow() for _ in range(3)] == [True, True, False]
    now[0] = 1.0
    assert bucket.allow() and not bucket.allow()


def test_tls_and_basic_auth_with_real_clients(pki, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    web = tmp_path / "web.yml"
    web.write_text(f"""
tls_server_config:
  cert_file: {pki.server_cert}
  key_file: {pki.server_key}
http_server_config:
  headers:
    X-Content-Type-Options: nosniff
    Strict-Transport-Security: max-age=31536000
basic_auth_users:
  prometheus: {bcrypt_hash("s3cret")}
""")
    ctx = client_context(pki)
    with serve([f"--web.config.file={web}", *FIXTURE_ARGS], tmp_path, scheme="https") as s:
        for path in ("/metrics", "/debug/oom/", "/debug/oom/x.json", "/"):
            status, headers, _ = http_get(s.url + path, context=ctx)
            assert status == 401 and headers["WWW-Authenticate"] == "Basic", path
            assert http_get(s.url + path, basic("prometheus", "wrong"), ctx)[0] == 401
        status, headers, body = http_get(s.url + "/metrics", basic("prometheus", "s3cret"), ctx)
        assert status == 200 and b'headroom_collector_success{collector="cgroup"} 1' in body
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Strict-Transport-Security"] == "max-age=31536000"
        assert http_get(s.url + "/debug/oom/", basic("prometheus", "s3cret"), ctx)[0] == 200
        # /healthz answers the kubelet's probe without credentials, over TLS only.
        assert http_get(s.url + "/healthz", context=ctx)[:1] == (200,)
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            http_get(f"http://127.0.0.1:{s.port}/healthz", timeout=3)
        # curl: another real TLS client, and the certificate names 127.0.0.1.
        out = subprocess.run(["curl", "-sS", "--cacert", str(pki.ca), "-u", "prometheus:s3cret",
                              s.url + "/metrics"], capture_output=True, timeout=30, text=True)
        assert out.returncode == 0 and "headroom_build_info" in out.stdout
        assert "s3cret" not in s.log_text()


def test_client_certificate_required(pki, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    web = tmp_path / "web.yml"
    web.write_text(f"""
tls_server_config:
  cert_file: {pki.server_cert}
  key_file: {pki.server_key}
  client_ca_file: {pki.ca}
  client_auth_type: RequireAndVerifyClientCert
  min_version: TLS13
""")
    with serve([f"--web.config.file={web}", *FIXTURE_ARGS], tmp_path, scheme="https") as s:
        assert http_get(s.url + "/metrics", context=client_context(pki, cert=True))[0] == 200
        for ctx in (client_context(pki), client_context(pki, intruder=True)):
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                http_get(s.url + "/metrics", context=ctx)
        tls12 = client_context(pki, cert=True)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            http_get(s.url + "/metrics", context=tls12)
        out = subprocess.run(["curl", "-sS", "--cacert", str(pki.ca), "--cert",
                              str(pki.client_cert), "--key", str(pki.client_key),
                              s.url + "/healthz"], capture_output=True, timeout=30, text=True)
        assert out.stdout == "ok\n"
    # A client certificate from the right CA with a SAN not in client_allowed_sans.
    web.write_text(web.read_text() + "  client_allowed_sans: [scraper.example]\n")
    with serve([f"--web.config.file={web}", *FIXTURE_ARGS], tmp_path, scheme="https") as s:
        assert http_get(s.url + "/metrics", context=client_context(pki, cert=True))[0] == 403


@pytest.mark.prometheus
def test_prometheus_scrapes_over_tls_with_basic_auth(pki, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("prometheus") is None:
        pytest.skip("needs prometheus")
    web = tmp_path / "web.yml"
    web.write_text(f"""
tls_server_config: {{cert_file: {pki.server_cert}, key_file: {pki.server_key},
  client_ca_file: {pki.ca}, client_auth_type: RequireAndVerifyClientCert}}
basic_auth_users: {{prometheus: "{bcrypt_hash("s3cret")}"}}
""")
    with serve([f"--web.config.file={web}", *FIXTURE_ARGS], tmp_path, scheme="https") as s:
        prom_port = free_port()
        # The scrape config any node_exporter user already has for TLS + basic auth.
        (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: headroom
    scheme: https
    tls_config: {{ca_file: {pki.ca}, cert_file: {pki.client_cert}, key_file: {pki.client_key}}}
    basic_auth: {{username: prometheus, password: s3cret}}
    static_configs: [{{targets: ["127.0.0.1:{s.port}"]}}]
  - job_name: headroom-no-auth
    scheme: https
    tls_config: {{ca_file: {pki.ca}, cert_file: {pki.client_cert}, key_file: {pki.client_key}}}
    static_configs: [{{targets: ["127.0.0.1:{s.port}"]}}]
""")
        with (tmp_path / "prom.log").open("wb") as prom_log:
            prom = subprocess.Popen(
                ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                stdout=subprocess.DEVNULL, stderr=prom_log)
        try:
            wait_port(prom_port, proc=prom)  # type: ignore[arg-type]
            health: dict[str, str] = {}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                url = f"http://127.0.0.1:{prom_port}/api/v1/targets"
                try:
                    with urllib.request.urlopen(url, timeout=5) as r:
                        targets = json.load(r)["data"]["activeTargets"]
                except OSError:  # 503 until Prometheus is ready
                    time.sleep(0.2)
                    continue
                health = {t["labels"]["job"]: (t["health"], t["lastError"]) for t in targets}
                if health.get("headroom", ("",))[0] == "up" and health.get(
                        "headroom-no-auth", ("",))[0] == "down":
                    break
                time.sleep(0.5)
            assert health["headroom"][0] == "up", health
            assert "401" in health["headroom-no-auth"][1], health
            q = f"http://127.0.0.1:{prom_port}/api/v1/query?query=headroom_build_info"
            with urllib.request.urlopen(q, timeout=5) as r:
                assert json.load(r)["data"]["result"], "no headroom series in Prometheus"
        finally:
            prom.terminate()
            prom.wait(timeout=30)


def test_sighup_reloads_web_config_and_sigterm_stays_graceful(pki, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """SIGHUP killed the exporter at once (exit 129, no cleanup). Now it re-reads the web
    config: a rotated certificate is served from the next handshake, new users apply, a
    broken file is refused with the old config kept; SIGTERM exits 0 (docs/threats.md:
    sighup)."""
    certs = tmp_path / "certs"
    shutil.copytree(pki.dir, certs)
    pki2 = type(pki)(certs, *(certs / p.name for p in (
        pki.ca, pki.server_cert, pki.server_key, pki.client_cert, pki.client_key,
        pki.other_client_cert, pki.other_client_key)))
    web = tmp_path / "web.yml"
    users = "basic_auth_users: {{prometheus: \"{}\"}}\n"
    tls = f"tls_server_config: {{cert_file: {pki2.server_cert}, key_file: {pki2.server_key}}}\n"
    web.write_text(tls + users.format(bcrypt_hash("one", cost=4)))
    ctx = client_context(pki2)

    def subject() -> str:
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls_sock:
            cert = tls_sock.getpeercert()
        assert cert is not None
        return str(dict(x[0] for x in cert["subject"])["commonName"])

    with serve([f"--web.config.file={web}", *FIXTURE_ARGS], tmp_path, scheme="https") as s:
        assert subject() == "headroom"
        assert http_get(s.url + "/metrics", basic("prometheus", "one"), ctx)[0] == 200
        reissue_server(pki2)
        web.write_text(tls + users.format(bcrypt_hash("two", cost=4)))
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert s.proc.poll() is None, "SIGHUP killed the exporter"
        assert subject() == "headroom-rotated"
        assert http_get(s.url + "/metrics", basic("prometheus", "one"), ctx)[0] == 401
        assert http_get(s.url + "/metrics", basic("prometheus", "two"), ctx)[0] == 200
        web.write_text("basic_auth_users: {prometheus: plaintext}\n")
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert http_get(s.url + "/metrics", basic("prometheus", "two"), ctx)[0] == 200
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=15) == 0
        log = s.log_text()
        assert "web config reloaded" in log and "web config not reloaded" in log
        assert "shutting down" in log


def test_sighup_without_web_config_keeps_serving(tmp_path: Path) -> None:
    with serve(list(FIXTURE_ARGS), tmp_path) as s:
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert s.proc.poll() is None, f"exited {s.proc.returncode} on SIGHUP"
        assert http_get(s.url + "/healthz")[0] == 200


def test_idle_connections_before_the_tls_handshake_are_capped(pki, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """asyncio's TLS server creates the protocol only after the handshake: 1,000
    connections that never send a ClientHello held 1,000 descriptors outside the cap
    (1,007 of 1,024 used). Now TLS starts after admission, so the cap covers them."""
    if shutil.which("prlimit") is None:
        pytest.skip("needs prlimit")
    raise_nofile(4096)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config: {{cert_file: {pki.server_cert}, "
                   f"key_file: {pki.server_key}}}\n")
    ctx = client_context(pki)
    with serve([f"--web.config.file={web}", *FIXTURE_ARGS], tmp_path, scheme="https",
               prefix=["prlimit", "--nofile=1024:1024"]) as s, idle_connections(s.port):
        time.sleep(0.5)
        assert http_get(s.url + "/metrics", context=ctx)[0] == 200
        assert http_get(s.url + "/healthz", context=ctx)[0] == 200
        fds = len(list(Path(f"/proc/{s.proc.pid}/fd").iterdir()))
        assert fds < 512, fds
