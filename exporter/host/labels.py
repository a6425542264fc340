"""Label values from hostile input: bounded in length, free of control characters.

A pod chooses its process names (argv[0] may be 128 KiB), its mount points and, through
vLLM, model names. Every such value is made safe once, where it enters headroom, before it
is grouped, cached or recorded: truncated to ``LABEL_MAX`` characters with a visible
marker (so two long names with one prefix become one series, summed, rather than two
colliding ones), with control and bidirectional-override characters shown as escapes
(a raw ESC or RTL override in a label value rewrites what a terminal or a dashboard
shows).
"""

from __future__ import annotations

import hashlib

from exporter.host.logs import escape_control

LABEL_MAX = 128
MARKER = "..."


def bounded(value: str, limit: int = LABEL_MAX) -> str:
    """``value`` made safe for a label: escapes, then at most ``limit`` characters plus
    the marker."""
    if len(value) > 4 * limit:
        value = value[: 4 * limit]  # escaping can only lengthen: cut the work first
    safe = escape_control(value)
    return safe if len(safe) <= limit else safe[:limit] + MARKER


def bounded_unique(value: str, limit: int = LABEL_MAX) -> str:
    """Like ``bounded``, for a value that identifies a series on its own (a cgroup path
    as the ``pod`` label): a cut value ends in a hash of the whole one, so two long paths
    with one prefix stay two series instead of colliding."""
    safe = bounded(value, limit)
    if not safe.endswith(MARKER) or len(escape_control(value)) <= limit:
        return safe
    digest = hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return safe[: limit - len(MARKER) - 12] + MARKER + digest
