"""What /proc says about one process (pure parsers, and two small readers): its command
line, the memory lines of its status, its PSS from smaps_rollup, its parent, state and
start time from stat, its network namespace; and the pids a cgroup lists.

Facts only: the per-process memory source (``procfs``) names and groups processes, and
``collectors/vllm/identity.py`` decides which of them are vLLM's and what each one is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from exporter.model import ProcessPss

# A command line is read up to this much: enough for a title or `vllm serve` and its
# flags; a process may hold megabytes there (ARG_MAX).
CMDLINE_MAX_BYTES = 64 << 10


def split_cmdline(raw: bytes) -> list[str]:
    """/proc/PID/cmdline -> argv (a retitled process is one padded title: split on space)."""
    parts = [p.decode("utf-8", "replace") for p in raw.split(b"\0") if p]
    if len(parts) == 1 and " " in parts[0]:
        return parts[0].split()
    return parts


def _kb_after(text: str, key: str) -> int | None:
    """The number after ``\n<key>`` in a status file, in bytes (str.find: C speed)."""
    i = text.find(key)
    if i < 0:
        return None
    return int(text[i + len(key): text.index("kB", i)]) * 1024


def parse_status(text: str) -> tuple[str, int, int, int, int] | None:
    """(Name, rss_anon, rss_file, rss_shmem, swap) in bytes; None for a zombie or kernel
    thread (no Rss lines). Runs for every process on every scrape, hence plain finds: the
    three Rss lines have been adjacent since Linux 4.5, split as one slice."""
    i = text.find("\nRssAnon:")
    if i < 0:
        return None
    name = text[6: text.find("\n")] if text.startswith("Name:\t") else ""
    f = text[i: i + 160].split()
    if len(f) >= 8 and f[3] == "RssFile:" and f[6] == "RssShmem:":
        anon, file, shmem = int(f[1]) * 1024, int(f[4]) * 1024, int(f[7]) * 1024
    else:  # another layout: look each one up
        anon = _kb_after(text, "\nRssAnon:") or 0
        file = _kb_after(text, "\nRssFile:") or 0
        shmem = _kb_after(text, "\nRssShmem:") or 0
    return name, anon, file, shmem, _kb_after(text, "\nVmSwap:") or 0


def parse_smaps_rollup(text: str) -> ProcessPss:
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("Pss_Anon", "Pss_File", "Pss_Shmem"):
            words = rest.split()
            if not words:  # only ValueError may leave a parser (fuzz tier)
                raise ValueError(f"smaps_rollup: {key} has no value")
            fields[key] = int(words[0]) * 1024
    if not fields:
        raise ValueError("smaps_rollup has no Pss_Anon/Pss_File/Pss_Shmem (kernel < 5.7?)")
    return ProcessPss(
        anon=fields.get("Pss_Anon", 0),
        file=fields.get("Pss_File", 0),
        shmem=fields.get("Pss_Shmem", 0),
    )


def parse_cgroup_procs(text: str) -> list[int]:
    # isascii: str.isdigit() also accepts digits int() refuses ("¹").
    return [n for n in (int(w) for w in text.split() if w.isascii() and w.isdigit()) if n]


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
