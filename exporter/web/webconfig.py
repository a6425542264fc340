"""``--web.config.file``: TLS, basic auth and response headers in the exporter-toolkit
format, so a Prometheus scrape config written for node_exporter works unchanged.

The file (YAML, unknown or duplicate keys rejected, as Go's strict decoder does)::

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to the file's directory
      key_file: server.key           # (or inline: cert, key, client_ca)
      client_ca_file: ca.crt
      client_auth_type: RequireAndVerifyClientCert
      client_allowed_sans: [prometheus.monitoring.svc]
      min_version: TLS12             # TLS10..TLS13; default TLS12 (max TLS13)
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # TLS <= 1.2 only
      prefer_server_cipher_suites: true
    http_server_config:
      headers: {X-Content-Type-Options: nosniff}
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt hashes
    rate_limit: {interval: 100ms, burst: 10}

Differences from exporter-toolkit, each because Python's ``ssl`` cannot do it, and each an
error naming the key rather than a silent downgrade: ``client_auth_type``
``RequestClientCert`` and ``RequireAnyClientCert`` (a certificate taken without
verification: exporter-toolkit's docs call them insecure), and ``curve_preferences``.
``http2`` is accepted and has no effect (aiohttp serves HTTP/1.1). The verifying client
auth types need a client CA (Go would fall back to the system roots: too broad for a
node agent). The file is read at start and on SIGHUP, not on every request.

This module parses and validates; ``tls`` builds the server context from the settings,
``auth`` checks basic auth and the rate limit, and ``security`` holds the config in force.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.web.tls import TlsSettings, ssl_context

TLS_VERSIONS: Mapping[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's names (crypto/tls CipherSuites(), the secure ones) -> OpenSSL's. TLS 1.3 suites are
# listed by Go but not configurable there either: accepted, and OpenSSL's defaults apply.
CIPHER_SUITES: Mapping[str, str | None] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}

CLIENT_AUTH: Mapping[str, ssl.VerifyMode] = {
    "": ssl.CERT_NONE,
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")

# Headers a web config may set, with the values allowed where they are an enumeration
# (exporter-toolkit's list: other headers could break Prometheus or browsers).
HEADERS: Mapping[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

# A web config is a few kB (inline PEM included); the cap bounds what one read and parse
# costs (a 30 MB file once held the event loop for about 60 s).
MAX_WEB_CONFIG_BYTES = 1 << 20
# PyYAML (pure Python: the C loader crashes on deep nesting) costs up to ~50 us per node,
# so 1 MiB of "[1,1,1,...]" was ~28 s of CPU. Nodes are bounded before parsing by the
# marks that make them: a web config has a few hundred; 1 MiB of inline PEM has ~16,000
# line breaks. With it, one file costs at most ~2 s of CPU (benchmarks/web_cost.py).
MAX_WEB_CONFIG_MARKS = 20_000
_STRUCTURE = (",", "[", "{", ":", "&", "*", "-", "\n")
# PyYAML's scanner is quadratic in flow nesting (16 KiB of "[" cost minutes of CPU); a web
# config has a handful of flow collections.
MAX_WEB_CONFIG_BRACKETS = 256

_BCRYPT_RE = re.compile(r"^\$2[abxy]?\$(\d\d)\$[./A-Za-z0-9]{53}$")
_TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
_TLS_KEYS = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
             "client_ca_file", "client_allowed_sans", "min_version", "max_version",
             "cipher_suites", "prefer_server_cipher_suites", "curve_preferences"}
_HTTP_KEYS = {"http2", "headers"}
_RATE_KEYS = {"interval", "burst"}


class WebConfigError(Exception):
    """Every problem of one web config file (a bad file is refused whole)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class WebConfig:
    tls: TlsSettings | None = None
    users: Mapping[str, bytes] = field(default_factory=dict, repr=False)  # name -> hash
    headers: Mapping[str, str] = field(default_factory=dict)
    rate_interval: float = 0.0  # seconds between requests; 0: no limit
    rate_burst: int = 0


class _StrictLoader(yaml.SafeLoader):
    """A safe loader that refuses duplicate keys (the last would win silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_mapping(node))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                              _construct_mapping)


def _parse_go_duration(text: str) -> float:
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 100ms, 1s)")
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * units[u] for n, u in parts)


def _mapping(value: Any, where: str, allowed: set[str], problems: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{where}: must be a mapping")
        return {}
    for key in value:
        if key not in allowed:
            problems.append(f"{where}: unknown key {key!r}")
    return value


def _string(section: Mapping[str, Any], key: str, where: str, problems: list[str]) -> str:
    value = section.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        problems.append(f"{where}.{key}: must be a string")
        return ""
    return value


def _read_pem(base: Path, name: str, where: str, problems: list[str]) -> str:
    path = base / name
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{where}: cannot read {path}: {getattr(exc, 'strerror', exc)}")
        return ""


def _tls(raw: dict[str, Any], base: Path, problems: list[str]) -> TlsSettings | None:
    w = "tls_server_config"
    s = {k: _string(raw, k, w, problems) for k in (
        "cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
        "client_ca_file", "min_version", "max_version")}
    if not any(s[k] for k in ("cert", "key", "client_ca", "cert_file", "key_file",
                              "client_ca_file", "client_auth_type")):
        return None  # exporter-toolkit: TLS is on when any of these is set
    for inline, path in (("cert", "cert_file"), ("key", "key_file"),
                         ("client_ca", "client_ca_file")):
        if s[inline] and s[path]:
            problems.append(f"{w}: set {inline} or {path}, not both")
    cert = s["cert"] or (_read_pem(base, s["cert_file"], f"{w}.cert_file", problems)
                         if s["cert_file"] else "")
    key = s["key"] or (_read_pem(base, s["key_file"], f"{w}.key_file", problems)
                       if s["key_file"] else "")
    if not s["cert"] and not s["cert_file"]:
        problems.append(f"{w}: missing one of cert or cert_file")
    if not s["key"] and not s["key_file"]:
        problems.append(f"{w}: missing one of key or key_file")
    client_ca = s["client_ca"] or (
        _read_pem(base, s["client_ca_file"], f"{w}.client_ca_file", problems)
        if s["client_ca_file"] else None)
    auth = s["client_auth_type"]
    if auth in _UNVERIFIED_CLIENT_AUTH:
        problems.append(f"{w}.client_auth_type: {auth} (a certificate accepted without "
                        "verification) is not supported; use RequireAndVerifyClientCert")
        mode = ssl.CERT_NONE
    elif auth not in CLIENT_AUTH:
        problems.append(f"{w}.client_auth_type: {auth!r} is not one of "
                        + ", ".join(k for k in CLIENT_AUTH if k))
        mode = ssl.CERT_NONE
    else:
        mode = CLIENT_AUTH[auth]
    if client_ca is not None and mode == ssl.CERT_NONE and auth not in _UNVERIFIED_CLIENT_AUTH:
        problems.append(f"{w}: a client CA is set without a client_auth_type that verifies")
    if mode != ssl.CERT_NONE and client_ca is None:
        problems.append(f"{w}.client_auth_type: {auth} needs client_ca_file (or client_ca)")
    versions = {}
    for key_name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        name = s[key_name] or default
        if name not in TLS_VERSIONS:
            problems.append(f"{w}.{key_name}: {name!r} is not one of "
                            + ", ".join(TLS_VERSIONS))
            name = default
        versions[key_name] = TLS_VERSIONS[name]
    if versions["min_version"] > versions["max_version"]:
        problems.append(f"{w}: min_version is above max_version")
    ciphers: list[str] = []
    for name in _string_list(raw, "cipher_suites", w, problems):
        if name not in CIPHER_SUITES:
            problems.append(f"{w}.cipher_suites: unknown or insecure suite {name!r}")
        elif CIPHER_SUITES[name] is not None:
            ciphers.append(str(CIPHER_SUITES[name]))
    if raw.get("curve_preferences"):
        problems.append(f"{w}.curve_preferences: not supported (Python's ssl module cannot "
                        "order curves); remove it")
    sans = raw.get("client_allowed_sans")
    allowed = tuple(_string_list(raw, "client_allowed_sans", w, problems)) if sans is not None \
        else None
    if allowed is not None and mode == ssl.CERT_NONE:
        problems.append(f"{w}.client_allowed_sans: needs a client_auth_type that verifies")
    prefer = raw.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        problems.append(f"{w}.prefer_server_cipher_suites: must be true or false")
        prefer = True
    settings = TlsSettings(cert=cert, key=key, client_ca=client_ca, verify_mode=mode,
                           allowed_sans=allowed, min_version=versions["min_version"],
                           max_version=versions["max_version"], ciphers=tuple(ciphers),
                           prefer_server_ciphers=prefer)
    if cert and key and not problems:
        try:
            ssl_context(settings)  # a key that does not match, a garbled PEM: now, not later
        except (ssl.SSLError, OSError, ValueError) as exc:
            problems.append(f"{w}: cannot load the certificate and key: {exc}")
    return settings


def _string_list(raw: Mapping[str, Any], key: str, where: str, problems: list[str]) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"{where}.{key}: must be a list of strings")
        return []
    return value


def _users(raw: Any, problems: list[str]) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append("basic_auth_users: must be a mapping of user name to bcrypt hash")
        return {}
    users = {}
    for name, hashed in raw.items():
        if not isinstance(name, str) or not name or ":" in name:
            problems.append(f"basic_auth_users: {name!r} is not a usable user name "
                            "(non-empty, no colon)")
            continue
        if not isinstance(hashed, str) or not _BCRYPT_RE.match(hashed):
            problems.append(f"basic_auth_users.{name}: not a bcrypt hash "
                            "(make one with: htpasswd -nBC 10 '' | tr -d ':\\n')")
            continue
        users[name] = hashed.encode()
    return users


def _headers(raw: dict[str, Any], problems: list[str]) -> dict[str, str]:
    headers = {}
    value = raw.get("headers") or {}
    if not isinstance(value, dict):
        problems.append("http_server_config.headers: must be a mapping")
        return {}
    for name, v in value.items():
        allowed = HEADERS.get(name)
        if allowed is None:
            problems.append(f"http_server_config.headers: {name!r} cannot be configured "
                            f"(one of {', '.join(HEADERS)})")
        elif not isinstance(v, str) or "\n" in v or "\r" in v:
            problems.append(f"http_server_config.headers.{name}: must be a one-line string")
        elif allowed and v not in allowed:
            problems.append(f"http_server_config.headers.{name}: {v!r} is not one of "
                            + ", ".join(allowed))
        elif v:
            headers[name] = v
    http2 = raw.get("http2", True)
    if not isinstance(http2, bool):
        problems.append("http_server_config.http2: must be true or false")
    return headers


def parse_web_config(text: str, base: Path) -> WebConfig:
    """The file's text -> a WebConfig; ``base`` resolves relative file names."""
    problems: list[str] = []
    marks = sum(map(text.count, _STRUCTURE))
    if marks > MAX_WEB_CONFIG_MARKS:
        raise WebConfigError([f"{marks} YAML separators and line breaks (at most "
                              f"{MAX_WEB_CONFIG_MARKS}): not a web config"])
    brackets = text.count("[") + text.count("{")
    if brackets > MAX_WEB_CONFIG_BRACKETS:
        raise WebConfigError([f"{brackets} [ and {{ (at most {MAX_WEB_CONFIG_BRACKETS}): "
                              "not a web config"])
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise WebConfigError([f"not valid YAML: {exc}".replace("\n", " ")]) from exc
    except RecursionError:  # "[[[[..." : PyYAML's composer recurses per level
        raise WebConfigError(["not valid YAML: nested too deeply"]) from None
    top = _mapping(doc, "web config", _TOP_KEYS, problems)
    tls = _tls(_mapping(top.get("tls_server_config"), "tls_server_config", _TLS_KEYS,
                        problems), base, problems)
    http = _mapping(top.get("http_server_config"), "http_server_config", _HTTP_KEYS, problems)
    headers = _headers(http, problems)
    users = _users(top.get("basic_auth_users"), problems)
    rate = _mapping(top.get("rate_limit"), "rate_limit", _RATE_KEYS, problems)
    interval, burst = 0.0, 0
    try:
        interval = _parse_go_duration(str(rate.get("interval", "0s")))
    except ValueError as exc:
        problems.append(f"rate_limit.interval: {exc}")
    b = rate.get("burst", 0)
    if not isinstance(b, int) or isinstance(b, bool) or b < 0:
        problems.append("rate_limit.burst: must be a non-negative integer")
    else:
        burst = b
    if interval > 0 and burst < 1:
        problems.append("rate_limit.burst: must be at least 1 when interval is set")
    if problems:
        raise WebConfigError(problems)
    return WebConfig(tls=tls, users=users, headers=headers, rate_interval=interval,
                     rate_burst=burst)


def load_web_config(path: Path, allow_empty: bool = True) -> WebConfig:
    """``allow_empty=False`` (a reload): an empty file is an error, not "no settings"
    (a file caught mid-write reads empty)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_WEB_CONFIG_BYTES + 1)
        text = data.decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError([f"cannot read {path}: {getattr(exc, 'strerror', exc)}"]) from exc
    if len(data) > MAX_WEB_CONFIG_BYTES:
        raise WebConfigError([f"{path}: larger than {MAX_WEB_CONFIG_BYTES >> 20} MiB "
                              "(a web config is a few kB; certificates go in files)"])
    if not allow_empty and not text.strip():
        raise WebConfigError([f"{path}: the file is empty (truncated mid-write?)"])
    try:
        return parse_web_config(text, path.parent)
    except WebConfigError as exc:
        raise WebConfigError([f"{path}: {p}" for p in exc.problems]) from None
