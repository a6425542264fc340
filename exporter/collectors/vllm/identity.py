"""Is this process a vLLM, and which role does it play: the one place that knows.

procfs and procfacts read the facts (command lines, parents); this module decides, from
those facts alone, which processes are vLLM's and what each one is.

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

The contract's ``process`` label of a vLLM process is its title without ``VLLM::``
(``EngineCore_DP1``, ``Worker_TP0``), and ``APIServer`` for an API server, whatever its
command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.host.labels import bounded

VLLM_TITLE_PREFIX = "VLLM::"
API_SERVER = "APIServer"  # the process label of an API server
# Titles of the processes an API server starts (never API servers themselves)
ENGINE_TITLES = ("EngineCore", "Worker", "DPCoordinator")
ENGINE_CORE = "EngineCore"  # the engine processes that hold the KV-event sockets
MAX_DEPTH = 64  # ancestors walked at most: /proc can change under us, a cycle must end
_API_SERVER_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")


def is_api_server_cmdline(argv: Sequence[str]) -> bool:
    """``vllm serve ...`` (a script, via an interpreter or behind an init like tini), or
    ``python -m`` one of the API server modules. The one test, shared by process naming
    and the vLLM collector's endpoint discovery. Linear in argv (a 64 KiB command line
    of "-m vllm.entrypoints.cli.main" pairs cost 90 ms when each looked ahead for
    "serve")."""
    last_serve = max((i for i, a in enumerate(argv) if a == "serve"), default=-1)
    for i, arg in enumerate(argv):
        base = arg.rsplit("/", 1)[-1]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if base == "vllm" and nxt == "serve":
            return True
        if arg == "-m" and nxt in _API_SERVER_MODULES:
            return True
        if arg == "-m" and nxt == "vllm.entrypoints.cli.main" and last_serve >= i + 2:
            return True
    return False


def is_vllm_cmdline(argv: Sequence[str]) -> bool:
    """A retitled vLLM process, or an API server by its command line."""
    return bool(argv) and (argv[0].startswith(VLLM_TITLE_PREFIX) or is_api_server_cmdline(argv))


def vllm_process_name(argv: Sequence[str]) -> str | None:
    """The ``process`` label of a vLLM process from its command line (bounded: see
    ``labels.bounded``), None for a process that is no vLLM by its command line."""
    if argv and argv[0].startswith(VLLM_TITLE_PREFIX):
        # A retitled process: the title may be padded, or carry spaces from setproctitle.
        title = argv[0][len(VLLM_TITLE_PREFIX):].split(maxsplit=1)
        return bounded(title[0]) if title else "vllm"
    if is_api_server_cmdline(argv):
        return API_SERVER
    return None


def engine_title(argv: Sequence[str]) -> str | None:
    """``EngineCore_DP1`` for a ``VLLM::EngineCore_DP1`` process, else None."""
    if not argv or not argv[0].startswith(VLLM_TITLE_PREFIX):
        return None
    words = argv[0][len(VLLM_TITLE_PREFIX):].split()
    title = words[0] if words else ""
    return title if title.startswith(ENGINE_TITLES) else None


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


@dataclass(frozen=True)
class ApiServer:
    """A vLLM API server of one container, found by the engine processes it started."""

    pid: int
    engines: tuple[int, ...]  # its VLLM::EngineCore* / Worker* / DPCoordinator processes
    engine_cores: tuple[int, ...]  # the EngineCore* ones (they hold the KV-event sockets)


def find_api_servers(ppids: Mapping[int, int], titles: Mapping[int, str]
                     ) -> tuple[ApiServer, ...]:
    """The API servers among one container's processes (``ppids``: each one's parent),
    from the engine titles of those that have one (``titles``: pid -> ``engine_title``)."""
    argvs = {pid: (f"{VLLM_TITLE_PREFIX}{titles[pid]}",) if pid in titles else ()
             for pid in ppids}
    return tuple(
        ApiServer(server, tuple(engines),
                  tuple(e for e in engines if titles.get(e, "").startswith(ENGINE_CORE)))
        for server, engines in sorted(api_servers(ppids, argvs).items()))
