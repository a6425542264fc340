"""Process trees from /proc (pure helpers): parents, children, and the vLLM API server
that owns a set of engine processes, whatever its command line.

vLLM retitles the processes it starts (``setproctitle``, vllm/utils/system_utils.py):
``VLLM::EngineCore`` or ``VLLM::EngineCore_DP<r>`` (v1/engine/core.py), ``VLLM::Worker`` or
``VLLM::Worker_TP<t>...`` (v1/executor/multiproc_executor.py), ``VLLM::DPCoordinator``.
The process that started them is the API server: ``vllm serve``, ``python -m
vllm.entrypoints.openai.api_server``, KServe's ``python -m huggingfaceserver``, a Ray or
in-house launcher, a Rust front end. Its own title is whatever the launcher made it, so
it is found as the nearest ancestor that is not an engine process. With
``--api-server-count > 1`` that ancestor is the ``vllm serve`` parent, which created the
listening socket that its ``VLLM::APIServer_<n>`` children inherit; with the multi-port
DP supervisor it is each ``VLLM::APIServer_DP<r>``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

VLLM_TITLE_PREFIX = "VLLM::"
# Titles of the processes an API server starts (never API servers themselves)
ENGINE_TITLES = ("EngineCore", "Worker", "DPCoordinator")
MAX_DEPTH = 64  # ancestors walked at most: /proc can change under us, a cycle must end


@dataclass(frozen=True)
class StatFields:
    pid: int
    comm: str
    state: str
    ppid: int


def parse_stat(text: str) -> StatFields | None:
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


def engine_title(argv: Sequence[str]) -> str | None:
    """``EngineCore_DP1`` for a ``VLLM::EngineCore_DP1`` process, else None."""
    if not argv or not argv[0].startswith(VLLM_TITLE_PREFIX):
        return None
    words = argv[0][len(VLLM_TITLE_PREFIX):].split()
    title = words[0] if words else ""
    return title if title.startswith(ENGINE_TITLES) else None


def children(ppids: Mapping[int, int]) -> dict[int, list[int]]:
    """pid -> its children (sorted), from pid -> ppid."""
    out: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        out.setdefault(ppid, []).append(pid)
    for kids in out.values():
        kids.sort()
    return out


def descendants(pid: int, kids: Mapping[int, Sequence[int]], limit: int = 4096) -> list[int]:
    """Every process below ``pid`` (breadth first, at most ``limit``)."""
    out: list[int] = []
    seen = {pid}
    queue = [pid]
    while queue and len(out) < limit:
        for child in kids.get(queue.pop(0), ()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                queue.append(child)
    return out[:limit]


def api_server_of(
    pid: int, ppids: Mapping[int, int], argvs: Mapping[int, Sequence[str]]
) -> int | None:
    """The API server owning engine process ``pid``: its nearest ancestor that is not an
    engine process. None when ``pid`` is not an engine process, or the chain leaves the
    known processes (``ppids`` and ``argvs`` hold one pod's processes: an API server
    outside the pod is not this pod's) or reaches pid 1 of the host."""
    if engine_title(argvs.get(pid, ())) is None:
        return None
    current = pid
    for _ in range(MAX_DEPTH):
        parent = ppids.get(current)
        if parent is None or parent <= 0 or parent not in argvs:
            return None
        if engine_title(argvs[parent]) is None:
            return parent
        current = parent
    return None


def api_servers(
    ppids: Mapping[int, int], argvs: Mapping[int, Sequence[str]]
) -> dict[int, list[int]]:
    """API server pid -> its engine processes, for every engine process in ``argvs``."""
    out: dict[int, list[int]] = {}
    for pid in sorted(argvs):
        server = api_server_of(pid, ppids, argvs)
        if server is not None:
            out.setdefault(server, []).append(pid)
    return out
