"""A thread pool with a queue limit and a deadline, for work a client can ask for: bcrypt
checks, post-mortem pages.

A request that finds the pool and its queue full, or whose work has not finished by the
deadline, is refused at once (``Busy``: the server answers 503) instead of waiting in an
unbounded queue; queued work whose deadline passed before a thread took it is dropped
unrun. So a flood costs at most ``workers`` threads of CPU and ``workers + queue`` pending
jobs, and it never holds the default executor, where the collectors run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class Busy(Exception):
    """The pool is full, or the work missed its deadline."""


class _Expired(Exception):
    pass


class BoundedPool:
    def __init__(self, name: str, workers: int, queue: int, deadline: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.workers = workers
        self.limit = workers + queue
        self.deadline = deadline
        self._clock = clock
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self.pending = 0  # admitted and not finished (or dropped); on the event loop only
        self.refused = 0

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in a pool thread; raises Busy when full or past the deadline."""
        if self.pending >= self.limit:
            self.refused += 1
            raise Busy(f"{self.pending} requests already pending")
        expires = self._clock() + self.deadline

        def job() -> T:
            if self._clock() > expires:
                raise _Expired
            return fn()

        self.pending += 1
        fut = asyncio.get_running_loop().run_in_executor(self._pool, job)
        fut.add_done_callback(self._done)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.deadline)
        except (TimeoutError, _Expired):
            self.refused += 1
            raise Busy(f"not done within {self.deadline:g}s") from None

    def _done(self, fut: asyncio.Future[T]) -> None:
        self.pending -= 1
        if not fut.cancelled():
            fut.exception()  # retrieved: an expired job is not an unhandled error

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
