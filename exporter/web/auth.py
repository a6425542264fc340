"""Who may ask: basic auth against bcrypt hashes, with cached verdicts, and the rate limit
(exporter-toolkit's ``basic_auth_users`` and ``rate_limit``). Both are built from a
``webconfig.WebConfig`` by ``security.Security`` and applied by the app's middleware.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

# A bcrypt hash of a random password made at import: an unknown user costs one bcrypt
# check like a known one, so response times do not tell which user names exist.
_DUMMY_HASH: bytes | None = None
_DUMMY_LOCK = threading.Lock()


def _dummy_hash() -> bytes:
    global _DUMMY_HASH
    with _DUMMY_LOCK:
        if _DUMMY_HASH is None:
            import bcrypt

            _DUMMY_HASH = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(10))
        return _DUMMY_HASH


class BasicAuth:
    """Checks ``Authorization: Basic`` against bcrypt hashes, caching verdicts.

    bcrypt at cost 10 costs ~70 ms of CPU (cost 12: ~280 ms); Prometheus sends the same
    credentials every scrape, so verdicts are cached, keyed by an HMAC of user, hash and
    password under a per-process key: no password is kept in memory. Good verdicts and
    bad ones are kept apart, each bounded, least recently used out, and a hit refreshes
    its entry (in one shared cache that a hit did not refresh, 100 distinct wrong
    passwords evicted Prometheus's verdict and its scrapes queued behind the flood's
    bcrypt checks). ``check`` is blocking: the caller runs it
    off the event loop in a bounded pool (``workpool.BoundedPool``).
    """

    def __init__(self, users: Mapping[str, bytes], cache_size: int = 100,
                 bad_cache_size: int = 1000, previous: BasicAuth | None = None) -> None:
        self._users = dict(users)
        self._cache_size = cache_size
        self._bad_cache_size = bad_cache_size
        # After a reload, verdicts carry over: the key includes the hash, so a changed
        # or removed user's entries simply stop matching.
        self._key: bytes = previous._key if previous is not None else secrets.token_bytes(32)
        self._good: OrderedDict[bytes, None] = OrderedDict(
            previous._good if previous is not None else ())
        self._bad: OrderedDict[bytes, None] = OrderedDict(
            previous._bad if previous is not None else ())
        self._lock = threading.Lock()  # the caches
        self._bcrypt_lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self._users)

    def cached(self, header: str | None) -> bool | None:
        """The verdict if known without bcrypt (a missing or malformed header: False)."""
        creds = parse_basic(header)
        if creds is None:
            return False
        return self._lookup(self._cache_key(*creds))

    def _lookup(self, key: bytes) -> bool | None:
        with self._lock:
            for cache, verdict in ((self._good, True), (self._bad, False)):
                if key in cache:
                    cache.move_to_end(key)
                    return verdict
        return None

    def check(self, header: str | None) -> bool:
        """Blocking (bcrypt): call from a worker thread."""
        import bcrypt

        creds = parse_basic(header)
        if creds is None:
            return False
        user, password = creds
        key = self._cache_key(user, password)
        known = self._lookup(key)
        if known is not None:
            return known
        hashed = self._users.get(user)
        with self._bcrypt_lock:
            try:
                ok = bcrypt.checkpw(password, hashed or _dummy_hash())
            except ValueError:  # a password over bcrypt's 72-byte limit, a bad hash
                ok = False
        ok = ok and hashed is not None
        cache, size = (self._good, self._cache_size) if ok else (
            self._bad, self._bad_cache_size)
        with self._lock:
            cache[key] = None
            while len(cache) > size:
                cache.popitem(last=False)
        return ok

    def _cache_key(self, user: str, password: bytes) -> bytes:
        hashed = self._users.get(user, b"")
        msg = b"\0".join((user.encode("utf-8", "surrogateescape"), hashed, password))
        return hmac.new(self._key, msg, hashlib.sha256).digest()


def parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """``Basic base64(user:password)`` -> (user, password); None when malformed."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token or len(token) > 4096:
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    return user.decode("utf-8", "surrogateescape"), password


class TokenBucket:
    """exporter-toolkit's rate_limit: one request per ``interval``, bursts of ``burst``."""

    def __init__(self, interval: float, burst: int,
                 clock: Any = time.monotonic) -> None:
        self._interval = interval
        self._burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def allow(self) -> bool:
        if self._interval <= 0:
            return True
        now = self._clock()
        self._tokens = min(float(self._burst), self._tokens + (now - self._at) / self._interval)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False
