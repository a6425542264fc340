"""One rendering per collection and format, shared by the scrapes that arrive together.

Rendering a large node is CPU work. When every concurrent scrape rendered on its own in
the shared thread pool, a burst of 150 scrapes queued the collectors behind the renders,
they timed out, and a scrape in the burst came back without workload series. So the
scrapes of one collection wait on one rendering, in a thread of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field


@dataclass
class Renders:
    """One rendering per (collection, format), shared by the scrapes that wait on it, in a
    thread of its own so that renders never queue in front of the collectors."""

    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="render"))
    snapshot: object = None
    bodies: dict[str | None, asyncio.Future[tuple[bytes, str]]] = field(default_factory=dict)

    async def get(self, snapshot: object, accept: str | None,
                  make: Callable[[], tuple[bytes, str]]) -> tuple[bytes, str]:
        if snapshot is not self.snapshot:
            self.snapshot, self.bodies = snapshot, {}
        key = "om" if accept and "application/openmetrics-text" in accept else None
        fut = self.bodies.get(key)
        if fut is None:
            fut = self.bodies[key] = asyncio.get_running_loop().run_in_executor(
                self.pool, make)
        return await asyncio.shield(fut)

