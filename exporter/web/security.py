"""The web config in force: basic auth, the rate limit and TLS, swapped whole on SIGHUP.

A reload reads and parses the file in a thread, one reload at a time, and is refused
(the old config kept, said at warning level) when the file is bad, empty, or would turn
authentication, client certificate checks or TLS off: a file caught mid-write must never
open the exporter. A new certificate, key or client CA applies from the next handshake:
the listener's context is fixed at start, and its SNI callback, which OpenSSL calls for
every ClientHello, switches each connection to the newest context.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

from exporter.web.auth import BasicAuth, TokenBucket
from exporter.web.tls import ssl_context
from exporter.web.webconfig import WebConfig, WebConfigError, load_web_config

log = logging.getLogger(__name__)


class Security:
    """The web config in force, swapped whole on SIGHUP (a bad file keeps the old one).

    TLS stays on or off as started (the listener is made once), and the parameters of a
    handshake other than the certificate, key and client CA (versions, ciphers, client
    auth type) apply from the next start: each handshake picks up the newest context
    through the SNI callback, which OpenSSL calls for every ClientHello."""

    def __init__(self, path: Path | None, config: WebConfig | None = None) -> None:
        self.path = path
        self.config = config or WebConfig()
        self._reloading: asyncio.Future[None] | None = None
        self._again = False
        self._apply(self.config)
        # The listener's context, fixed at start; handshakes switch to the newest one.
        self.listener_ssl: ssl.SSLContext | None = self.ssl
        if self.listener_ssl is not None:
            self.listener_ssl.sni_callback = self._pick_context

    @classmethod
    def load(cls, path: Path | None) -> Security:
        """Raises WebConfigError naming every problem of the file."""
        return cls(path, load_web_config(path) if path is not None else None)

    def _apply(self, cfg: WebConfig) -> None:
        self.config = cfg
        self.auth = BasicAuth(cfg.users, previous=getattr(self, "auth", None))
        self.limiter = TokenBucket(cfg.rate_interval, cfg.rate_burst) \
            if cfg.rate_interval > 0 else None
        self.ssl = ssl_context(cfg.tls) if cfg.tls is not None else None

    def _pick_context(self, sslobj: ssl.SSLObject, name: str | None,
                      ctx: ssl.SSLContext) -> None:
        if self.ssl is not None and sslobj.context is not self.ssl:
            sslobj.context = self.ssl

    def request_reload(self) -> None:
        """The SIGHUP handler, on the event loop: the file is read and parsed in a thread
        (a large file must not hold the event loop), one reload at a time; a SIGHUP
        during one asks for another."""
        if self._reloading is not None and not self._reloading.done():
            self._again = True
            return
        self._reloading = asyncio.ensure_future(self._reload_until_settled())

    async def _reload_until_settled(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            await self.reload()

    async def reload(self) -> bool:
        """Re-read the file; False (and the old config kept, said at warning level) when
        it is bad, empty, or would turn authentication or TLS off: a file caught
        mid-write must never open the exporter (an empty file once turned basic
        auth off, logged at info)."""
        if self.path is None:
            log.info("SIGHUP: no --web.config.file to reload")
            return True
        try:
            cfg = await asyncio.to_thread(load_web_config, self.path, False)
        except WebConfigError as exc:
            log.warning("web config not reloaded, keeping the old one: %s", exc)
            return False
        return self.adopt(cfg)

    def adopt(self, cfg: WebConfig) -> bool:
        """Apply a newly read config unless it would switch TLS or turn auth off."""
        refusal = reload_refusal(self.config, cfg)
        if refusal is not None:
            log.warning("web config not reloaded from %s, keeping the old one: %s",
                        self.path, refusal)
            return False
        old = self.config.tls
        if old is not None and cfg.tls is not None and (
                old.verify_mode, old.min_version, old.max_version, old.ciphers) != (
                cfg.tls.verify_mode, cfg.tls.min_version, cfg.tls.max_version,
                cfg.tls.ciphers):
            log.warning("web config reloaded; TLS versions, ciphers and client auth type "
                        "take effect at the next start")
        self._apply(cfg)
        log.info("web config reloaded from %s", self.path)
        return True


def reload_refusal(old: WebConfig, new: WebConfig) -> str | None:
    """Why ``new`` may not replace ``old`` on SIGHUP (None: it may). What opens the
    exporter (auth or TLS off) takes a restart: a truncated file reads the same."""
    if (new.tls is None) != (old.tls is None):
        return "TLS cannot be switched on or off without a restart"
    if old.users and not new.users:
        return ("it has no basic_auth_users (truncated mid-write?); turning "
                "authentication off takes a restart")
    if old.tls is not None and new.tls is not None and (
            (old.tls.allowed_sans is not None and new.tls.allowed_sans is None)
            or (old.tls.verify_mode != ssl.CERT_NONE and new.tls.verify_mode == ssl.CERT_NONE)):
        return "client certificate checks cannot be turned off without a restart"
    return None
