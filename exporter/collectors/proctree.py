"""Process facts from /proc that are not memory (pure helpers): a process's parent, state
and start time from ``/proc/<pid>/stat``, and the network namespace it is in.

What those facts mean for vLLM (which process is an API server, which an engine) is
decided in ``collectors/vllm/identity.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class StatFields:
    pid: int
    comm: str
    state: str
    ppid: int


def parse_pid_stat(text: str) -> StatFields | None:
    """``/proc/<pid>/stat`` -> pid, comm, state, ppid; None when malformed.

    comm sits in parentheses and may itself hold ``)``, spaces or newlines (a process
    names itself): the fields after it start at the *last* ``)``.
    """
    open_ = text.find("(")
    close = text.rfind(")")
    if open_ <= 0 or close < open_:
        return None
    pid = text[:open_].strip()
    rest = text[close + 1:].split(maxsplit=3)
    if not pid.isdigit() or len(rest) < 2 or not rest[1].lstrip("-").isdigit():
        return None
    return StatFields(int(pid), text[open_ + 1: close], rest[0], int(rest[1]))


def start_time(stat: str) -> int:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot); the command
    name (field 2) may hold spaces and parentheses, so fields are counted after its
    last ')'."""
    return int(stat.rpartition(")")[2].split()[19])


def netns(procfs: str, pid: int | str) -> int | None:
    """Inode of a process's network namespace (None when it cannot be read)."""
    try:
        return os.stat(f"{procfs}/{pid}/ns/net").st_ino
    except OSError:
        return None
