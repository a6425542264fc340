"""The ``headroom`` command's first code: SIGHUP is caught before anything else is
imported or started (docs/threats.md: early-sighup; a SIGHUP in the first second, while
the exporter was still importing and reading its config, killed it with an empty log: the
kernel's default action for SIGHUP is to terminate).

Until ``serve`` installs its reload handler, a SIGHUP is only counted: the web config is
read at start anyway. Nothing heavy is imported here.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

early_sighups = 0  # SIGHUPs seen before serving (or after it stopped)


def _count_sighup(_signum: int, _frame: FrameType | None) -> None:
    global early_sighups
    early_sighups += 1


def hold_sighup() -> None:
    """SIGHUP counted, not fatal; called first, and again once the event loop is gone
    (closing it restores the kernel's default)."""
    signal.signal(signal.SIGHUP, _count_sighup)


def main() -> int:
    """The console script's entry point."""
    hold_sighup()
    from exporter.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
