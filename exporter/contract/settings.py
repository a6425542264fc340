"""Declared settings: every flag, its ``HEADROOM_*`` environment twin, its default and its
help are written once, as a field of a frozen settings dataclass.

    @dataclass(frozen=True)
    class ProcfsSettings(Settings):
        max_processes: int = setting("--procfs.max-processes", "10", int, "process names ...")

The default is given as the text a user would type ("60s", "2GiB") and parsed by the same
function as the flag, so help, chart values and the typed default cannot disagree.
Values are parsed as strings first and validated afterwards, so a bad command line gets one
message that names every problem (argparse stops at the first).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
S = TypeVar("S", bound="Settings")

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|k|M|G|T)?$")
_SIZE_UNITS = {
    None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
    "k": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
}


def parse_duration(text: str) -> float:
    """Seconds from ``200ms``, ``30s``, ``1m30s``, ``1h`` (Prometheus style) or a number."""
    t = text.strip()
    units = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    parts = list(_DURATION_RE.finditer(t))
    if not t or "".join(m.group(0) for m in parts) != t or (
        len(parts) > 1 and any(m.group(2) is None for m in parts)
    ):
        raise ValueError(f"not a duration: {text!r} (use e.g. 200ms, 30s, 1m30s, 1h)")
    return sum(float(m.group(1)) * units[m.group(2)] for m in parts)


def parse_size(text: str) -> int:
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 2GiB, 512MiB, 1048576)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"not a listen address: {text!r} (use host:port or :port)")
    return host.strip("[]"), int(port)


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def optional_path(text: str) -> Path | None:
    """An empty value turns the feature off."""
    return Path(text) if text else None


def optional_str(text: str) -> str | None:
    return text or None


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return text
    return parse


def env_name(flag: str) -> str:
    return "HEADROOM_" + re.sub(r"[.\-]", "_", flag.lstrip("-")).upper()


@dataclass(frozen=True)
class Setting:
    """One flag. ``parse`` turns the text (of one item, for a repeatable flag) into the
    field's value; ``check`` names a problem with a parsed value, or returns None."""

    flag: str
    default: str | None  # as typed by a user; None: no default (repeatable flags)
    parse: Callable[[str], object]
    help: str
    repeat: bool = False  # repeatable flag; its env twin is comma-separated
    check: Callable[[object], str | None] | None = None
    env_fallback: str | None = None  # a second environment variable (NODE_NAME)

    @property
    def env(self) -> str:
        return env_name(self.flag)


def setting(flag: str, default: str, parse: Callable[[str], T], help: str, *,
            check: Callable[[T], str | None] | None = None,
            env_fallback: str | None = None) -> T:
    """A settings field: the typed default is ``parse(default)``."""
    meta = Setting(flag, default, parse, help, check=check,  # type: ignore[arg-type]
                   env_fallback=env_fallback)
    value: T = dataclasses.field(default=parse(default), metadata={"setting": meta})
    return value


def repeated(flag: str, parse: Callable[[str], T], help: str) -> tuple[T, ...]:
    """A repeatable flag (its env twin is comma-separated); default: none."""
    meta = Setting(flag, None, parse, help, repeat=True)
    value: tuple[T, ...] = dataclasses.field(default=(), metadata={"setting": meta})
    return value


def at_least(low: float, unit: str = "") -> Callable[[float], str | None]:
    def check(value: float) -> str | None:
        return f"must be at least {low:g}{unit}" if value < low else None
    return check


def positive(value: float) -> str | None:
    return "must be positive" if value <= 0 else None


@dataclass(frozen=True)
class Settings:
    """Base of every settings group. ``problems`` checks values across fields."""

    def problems(self) -> list[str]:
        return []


def declared(cls: type[Settings]) -> Iterator[tuple[str, Setting]]:
    """(field name, setting) of every declared field of a settings class."""
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("setting")
        if isinstance(meta, Setting):
            yield f.name, meta


def _dest(s: Setting) -> str:
    return "setting_" + re.sub(r"[.\-]", "_", s.flag.lstrip("-"))


def add_flags(parser: argparse.ArgumentParser, groups: tuple[type[Settings], ...]) -> None:
    for cls in groups:
        for _, s in declared(cls):
            default = f" (default {s.default})" if s.default else ""
            if s.repeat:
                parser.add_argument(s.flag, dest=_dest(s), action="append", default=None,
                                    metavar="VALUE",
                                    help=f"{s.help}; env {s.env}, comma-separated")
            else:
                parser.add_argument(s.flag, dest=_dest(s), default=None, metavar="VALUE",
                                    help=f"{s.help}{default}; env {s.env}")


def parse_group(cls: type[S], ns: argparse.Namespace, env: Mapping[str, str],
                problems: list[str]) -> S:
    """One settings group from flags (which win) and environment twins; problems are
    appended, never raised, and the default stands in for a bad value."""
    values: dict[str, object] = {}
    for name, s in declared(cls):
        raw: str | list[str] | None = getattr(ns, _dest(s), None)
        source = s.flag
        if raw is None:
            for key in (s.env, s.env_fallback):
                if key and env.get(key, "") != "":
                    raw = env[key].split(",") if s.repeat else env[key]
                    source = key
                    break
        if raw is None:
            continue
        try:
            if s.repeat:
                items = [raw] if isinstance(raw, str) else raw
                value: object = tuple(s.parse(v.strip()) for v in items if v.strip())
            else:
                assert isinstance(raw, str)
                value = s.parse(raw)
        except ValueError as exc:
            problems.append(f"{source}: {exc}")
            continue
        problem = s.check(value) if s.check is not None else None
        if problem:
            problems.append(f"{source}: {problem}")
            continue
        values[name] = value
    group = cls(**values)
    problems.extend(group.problems())
    return group
