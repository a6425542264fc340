"""Cost fuzz, the host half (docs/threats.md: parser-cost): what the parsers of mount tables,
process names and the web config cost, as their input grows.

Stated bounds, each checked below:
- linear: CPU time at 8n is at most ``8 x SLACK`` times CPU time at n (a quadratic parser
  shows ~64); peak traced memory is at most ``MEM_PER_BYTE x input + 1 MiB``;
- one input at the largest size its reader admits costs at most the CPU time stated in
  ``WORST_CPU`` (each ~5x what it measured on this 2-core machine), and runs in a worker
  thread: the event loop is never the one that pays it.

CPU time is ``thread_time`` (the parser's own thread, best of three), not wall-clock, and
only ratios between sizes are compared, except the worst-case bounds, which are seconds of
work on the largest input, not small work. Shapes: hand-written hostile ones (the known
worst cases) and hypothesis-chosen line units repeated to size (derandomized: CI runs the
same cases every time). Marker ``fuzz``.
"""

from __future__ import annotations

import contextlib
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.collectors.procfacts import CMDLINE_MAX_BYTES, parse_status, split_cmdline
from exporter.collectors.procfs import process_name
from exporter.collectors.tmpfs import (
    MOUNTINFO_MAX_BYTES,
    parse_mountinfo,
    read_mountinfo,
)
from exporter.web.webconfig import (
    MAX_WEB_CONFIG_BYTES,
    WebConfigError,
    load_web_config,
    parse_web_config,
)

pytestmark = pytest.mark.fuzz

SLACK = 3.0  # linear within 3x of 8x
MEM_PER_BYTE = 40  # a 14-byte mount line becomes a ~300-byte MountEntry
# PyYAML keeps tokens, events and nodes of the whole document: ~125 bytes per byte of a
# dense file, ~310 of nested block sequences ("- - - x"); the 20,000-mark cap bounds one
# parse to ~15 MB whatever the file's size.
WEB_MEM_PER_BYTE = 400
FLOOR = 0.005  # below 5 ms of CPU at 8n, too small to judge a ratio
WORST_CPU = {"mountinfo": 2.0, "cmdline": 0.25, "web config": 10.0}
FUZZ = settings(max_examples=15, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def cpu(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.thread_time()
        with contextlib.suppress(ValueError, WebConfigError):
            fn()  # a refusal is the parser's documented answer: its cost counts the same
        best = min(best, time.thread_time() - t)
    return best


def peak_memory(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        with contextlib.suppress(ValueError, WebConfigError):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def assert_linear(parse: Callable[[str], object], unit: str, base: int,
                  mem_per_byte: int = MEM_PER_BYTE) -> None:
    """``parse`` on ``unit`` repeated to ~``base`` and to 8 times that."""
    reps = max(1, base // max(1, len(unit)))
    small, big = unit * reps, unit * (8 * reps)
    t_small, t_big = cpu(lambda: parse(small)), cpu(lambda: parse(big))
    if t_big >= FLOOR:
        assert t_big <= 8 * SLACK * max(t_small, FLOOR / 8), (
            f"{len(small)} B: {t_small:.4f} s, {len(big)} B: {t_big:.4f} s")
    mem = peak_memory(lambda: parse(big))
    assert mem <= mem_per_byte * len(big) + (1 << 20), (len(big), mem)


def as_bytes(parse: Callable[[bytes], object]) -> Callable[[str], object]:
    return lambda text: parse(text.encode("utf-8", "surrogateescape"))


# --- mountinfo ---------------------------------------------------------------------------

MOUNT_LINE = ("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - tmpfs tmpfs "
              "rw,errors=continue\n")
MOUNT_SHAPES = {
    "ordinary lines": MOUNT_LINE,
    "escapes": "1 2 0:1 / /" + "\\040\\011\\134" * 64 + " rw - tmpfs t rw\n",
    "no separator": "x " * 64 + "\n",
    "many optional fields": "1 2 3 4 5 " + "o " * 256 + "- tmpfs s rw\n",
    "separators only": " - " * 64,
    "one long line": "1 2 0:1 / /" + "a" * 4096,
}


@pytest.mark.parametrize("shape", MOUNT_SHAPES)
def test_mountinfo_is_linear(shape: str) -> None:
    assert_linear(parse_mountinfo, MOUNT_SHAPES[shape], 256 << 10)


@FUZZ
@given(st.text(alphabet=st.sampled_from(list(" -\\0123456789:/\n\t\x85\u2028tmpfsab")),
               min_size=1, max_size=200))
def test_mountinfo_fuzzed_units_are_linear(unit: str) -> None:
    assert_linear(parse_mountinfo, unit, 64 << 10)


def test_mountinfo_over_its_cap_is_refused_and_at_the_cap_costs_little(
        tmp_path: Path) -> None:
    """A mount table over 4 MiB (a pod with its own mount namespace can make ~400 MB)
    is refused for that pod; one at the cap parses within WORST_CPU."""
    at_cap = MOUNT_LINE * (MOUNTINFO_MAX_BYTES // len(MOUNT_LINE))
    path = tmp_path / "mountinfo"
    path.write_text(at_cap + MOUNT_LINE)
    with pytest.raises(OSError, match="larger than 4 MiB"):
        read_mountinfo(path)
    path.write_text(at_cap)
    assert cpu(lambda: parse_mountinfo(read_mountinfo(path))) <= WORST_CPU["mountinfo"]


# --- process names: /proc/PID/cmdline and status ----------------------------------------

CMDLINE_SHAPES = {
    "api-server look-alike pairs": "-m\0vllm.entrypoints.cli.main\0",
    "vllm words": "vllm\0",
    "NUL padding": "\0",
    "one title with spaces": "VLLM::x a ",
    "many short args": "a\0",
    "spaces": "a ",
}


def name_of(raw: bytes) -> str:
    return process_name(split_cmdline(raw[:CMDLINE_MAX_BYTES]), "comm")


@pytest.mark.parametrize("shape", CMDLINE_SHAPES)
def test_process_names_are_linear(shape: str) -> None:
    """The cmdline is read up to 64 KiB: 8 KiB against 64 KiB."""
    assert_linear(as_bytes(name_of), CMDLINE_SHAPES[shape], CMDLINE_MAX_BYTES // 8)
    worst = (CMDLINE_SHAPES[shape] * CMDLINE_MAX_BYTES).encode()[:CMDLINE_MAX_BYTES]
    assert cpu(lambda: name_of(worst)) <= WORST_CPU["cmdline"]


@FUZZ
@given(st.lists(st.sampled_from(["-m", "serve", "vllm", "vllm.entrypoints.cli.main",
                                 "vllm.entrypoints.openai.api_server", "VLLM::Engine",
                                 "/usr/bin/python3", " ", "", "x" * 40]),
                min_size=1, max_size=12))
def test_process_name_fuzzed_argv_units_are_linear(words: list[str]) -> None:
    assert_linear(as_bytes(name_of), "\0".join(words) + "\0", CMDLINE_MAX_BYTES // 8)


STATUS = ("Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nVmRSS:\t  102400 kB\n"
          "RssAnon:\t   81920 kB\nRssFile:\t   20480 kB\nRssShmem:\t       0 kB\n"
          "VmSwap:\t       0 kB\n")


@pytest.mark.parametrize("tail", ["Threads:\t1\n", "RssFile: ", "x", "kB\n"])
def test_status_is_linear(tail: str) -> None:
    """/proc/PID/status is the kernel's text (a process chooses only its 15-byte Name),
    so only odd tails: the parser looks things up with find, never splits all of it."""
    assert_linear(lambda t: parse_status(STATUS + t), tail, 64 << 10)


# --- the web config ---------------------------------------------------------------------

WEB_SHAPES = {
    "many users": "basic_auth_users:\n" + "".join(f"  u{i}: x\n" for i in range(8)),
    "a flow list": "rate_limit: [" + "1," * 64 + "1]\n",
    "aliases": "a: &a [x]\nb: [" + "*a," * 64 + "*a]\n",
    "a comment": "#" + "x" * 1000 + "\n",
    "flow nesting": "[" * 64,
    "block nesting": "- " * 64 + "x\n",
    "long string": "basic_auth_users: {a: '" + "x y" * 300 + "'}\n",
}


@pytest.mark.parametrize("shape", WEB_SHAPES)
def test_web_config_is_linear(shape: str) -> None:
    assert_linear(lambda t: parse_web_config(t, Path(".")), WEB_SHAPES[shape], 1 << 10,
                  WEB_MEM_PER_BYTE)


@pytest.mark.parametrize("shape", WEB_SHAPES)
def test_web_config_at_its_cap_costs_at_most_the_stated_time(
        tmp_path: Path, shape: str) -> None:
    """The largest file the reader admits (1 MiB), of each shape: refused or parsed
    within WORST_CPU, never a RecursionError (``[[[[...``) or a crash."""
    unit = WEB_SHAPES[shape]
    text = (unit * (MAX_WEB_CONFIG_BYTES // len(unit) + 1))[:MAX_WEB_CONFIG_BYTES]
    path = tmp_path / "web.yml"
    path.write_text(text)
    assert cpu(lambda: load_web_config(path), repeat=1) <= WORST_CPU["web config"]
    path.write_text(text + "#" * 2)
    with pytest.raises(WebConfigError, match="larger than 1 MiB"):
        load_web_config(path)
