"""TLS for the listener: the settings a web config yields, the server context they build,
and the subject alternative names of a verified client certificate.

The context is built from PEM text (read from the files, or inline in the web config)
through anonymous in-memory files, so an inline key is never written to disk. Which
context a handshake uses after a reload is ``security.Security``'s job (the SNI swap).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TlsSettings:
    cert: str  # PEM text of the chain (read from cert_file, or inline)
    key: str = field(repr=False)
    client_ca: str | None = None
    verify_mode: ssl.VerifyMode = ssl.CERT_NONE
    allowed_sans: tuple[str, ...] | None = None
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    ciphers: tuple[str, ...] = ()  # OpenSSL names, TLS <= 1.2
    prefer_server_ciphers: bool = True


def _pem_file(text: str, name: str) -> str:
    """An anonymous in-memory file holding ``text``: ssl loads chains only from paths, and
    an inline key must not be written to disk."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, text.encode())
    return f"/proc/self/fd/{fd}"


def ssl_context(t: TlsSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = t.min_version
    ctx.maximum_version = t.max_version
    if t.ciphers:
        ctx.set_ciphers(":".join(t.ciphers))
    if t.prefer_server_ciphers:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    cert_path = _pem_file(t.cert, "headroom-cert")
    key_path = _pem_file(t.key, "headroom-key")
    try:
        ctx.load_cert_chain(cert_path, key_path)
    finally:
        for p in (cert_path, key_path):
            os.close(int(p.rsplit("/", 1)[1]))
    if t.client_ca is not None:
        ctx.load_verify_locations(cadata=t.client_ca)
    ctx.verify_mode = t.verify_mode
    return ctx


def peer_sans(peercert: Mapping[str, Any] | None) -> list[str]:
    """The subject alternative names of a verified peer certificate, as Go prints them."""
    out = []
    for kind, value in (peercert or {}).get("subjectAltName", ()):
        if kind in ("DNS", "IP Address", "email", "URI"):
            out.append(str(value).strip())
    return out
