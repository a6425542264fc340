"""Log lines a hostile pod cannot forge, split or flood.

Anything a pod controls (process names, cgroup names, vLLM bodies, HTTP requests) can end
up in a message. So every line is one line: logfmt values are quoted and escaped
(backslash, quote, newlines, every control character and the bidirectional overrides
that make a terminal show text in another order), JSON lines are ASCII-escaped; a
traceback is one escaped field. Each message template may log ``burst`` lines per
``period``; the rest are counted and the count is attached to the next line that passes
(``suppressed=N``). Malformed HTTP requests are one short line, not a traceback each
(200 headers per request once made 839 bytes of traceback per request).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable

# C0 and C1 controls, DEL, the Unicode bidi controls and line/paragraph separators, and
# lone surrogates (undecodable bytes of a file name, kept by surrogateescape).
_UNSAFE_RE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                        "\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_control(text: str, keep_newline: bool = False) -> str:
    """Control and bidi characters as visible escapes (``\\n``, ``\\u202e``);
    ``keep_newline`` leaves newlines to a format that escapes them itself."""
    def sub(m: re.Match[str]) -> str:
        c = m[0]
        if keep_newline and c == "\n":
            return c
        return _NAMED.get(c, f"\\u{ord(c):04x}")

    return _UNSAFE_RE.sub(sub, text)


def logfmt_value(value: object) -> str:
    text = "" if value is None else str(value)
    text = escape_control(text.replace("\\", "\\\\").replace('"', '\\"'))
    if text and re.fullmatch(r"[A-Za-z0-9_.:/@+\-]+", text):
        return text
    return f'"{text}"'


def _ts(record: logging.LogRecord) -> str:
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z")


def _fields(record: logging.LogRecord) -> dict[str, object]:
    extra = getattr(record, "fields", None)
    out: dict[str, object] = dict(extra) if isinstance(extra, dict) else {}
    suppressed = getattr(record, "suppressed", 0)
    if suppressed:
        out["suppressed"] = suppressed
    return out


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [f"ts={_ts(record)}", f"level={record.levelname.lower()}",
                 f"logger={logfmt_value(record.name)}",
                 f"msg={logfmt_value(record.getMessage())}"]
        for key, value in _fields(record).items():
            if re.fullmatch(r"[a-z_][a-z0-9_]*", key) and key not in ("ts", "level", "msg"):
                parts.append(f"{key}={logfmt_value(value)}")
        if record.exc_info:
            parts.append(f"exc={logfmt_value(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {"ts": _ts(record), "level": record.levelname.lower(),
                                  "logger": record.name, "msg": record.getMessage()}
        for key, value in _fields(record).items():
            doc.setdefault(key, value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        # ensure_ascii: control, bidi and every non-ASCII character become \\uXXXX.
        return json.dumps(doc, default=str, ensure_ascii=True)


class RateLimit(logging.Filter):
    """At most ``burst`` lines per message template (logger + unformatted message) per
    ``period`` seconds; the keys themselves are bounded (oldest forgotten)."""

    def __init__(self, burst: int = 10, period: float = 60.0, max_keys: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.period = period
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        # key -> [window start, lines in window, suppressed since last emitted]
        self._keys: dict[tuple[str, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg)[:200])
        now = self._clock()
        with self._lock:
            state = self._keys.get(key)
            if state is None:
                if len(self._keys) >= self.max_keys:
                    self._keys.pop(next(iter(self._keys)))
                state = self._keys[key] = [now, 0, 0]
            if now - state[0] >= self.period:
                state[0], state[1] = now, 0
            if state[1] >= self.burst:
                state[2] += 1
                return False
            state[1] += 1
            record.suppressed = int(state[2])
            state[2] = 0
        return True


class QuietBadRequests(logging.Filter):
    """aiohttp logs every malformed request with a traceback: keep one short line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "aiohttp.server" or not record.exc_info:
            return True
        exc = record.exc_info[1]
        from aiohttp.http_exceptions import HttpProcessingError

        if isinstance(exc, HttpProcessingError):
            first = str(getattr(exc, "message", "") or exc).splitlines()[0][:200] if str(
                exc) else type(exc).__name__
            record.msg = "bad request from %s: %s"
            record.args = (record.args[0] if isinstance(record.args, tuple) and record.args
                           else "?", f"{type(exc).__name__}: {first}")
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def setup_logging(level: str, fmt: str, stream: object = None) -> logging.Handler:
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    handler.addFilter(QuietBadRequests())
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return handler
