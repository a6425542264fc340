"""What wakes the sampler thread: one epoll set for every kernel notification (new
cgroups by inotify, kill counters, v1 usage thresholds) and a stop eventfd, so the thread
sleeps until a cgroup is due or the kernel says something moved, instead of ticking; and a
wake eventfd that another thread sets when it hands the sampler something to read now (a
scrape's newly discovered cgroups, whose kill counters must be read before they move)."""

from __future__ import annotations

import contextlib
import os
import select


class Wakeups:
    """Not thread-safe except ``stop`` and ``wake``, which any thread may call."""

    def __init__(self) -> None:
        self._stop = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll: select.epoll | None
        try:
            self._epoll = select.epoll()
            self._epoll.register(self._stop, select.EPOLLIN)
            self._epoll.register(self._wake, select.EPOLLIN)
        except OSError:  # no epoll (a seccomp profile that refuses it): plain sleeps
            self._epoll = None
        self.stopped = False

    @property
    def notifies(self) -> bool:
        return self._epoll is not None

    def watch(self, fd: int | None) -> None:
        """Wake on ``fd`` from now (a closed descriptor leaves the set by itself)."""
        if fd is None or self._epoll is None:
            return
        with contextlib.suppress(FileExistsError):
            self._epoll.register(fd, select.EPOLLIN)

    def unwatch(self, fd: int) -> None:
        """A descriptor nobody reads (it would keep the wait from sleeping)."""
        if self._epoll is not None:
            with contextlib.suppress(OSError):
                self._epoll.unregister(fd)

    def ready(self) -> list[int]:
        """Descriptors ready now (not the stop descriptor); never waits."""
        return self.wait(0)

    def wait(self, timeout: float) -> list[int]:
        """Sleep until a descriptor is ready, ``stop`` or ``timeout`` seconds."""
        if self.stopped:
            return []
        if self._epoll is None:
            self.pause(timeout)
            return []
        try:
            events = self._epoll.poll(max(0.0, timeout))
        except InterruptedError:
            return []
        out = []
        for fd, _ in events:
            if fd == self._stop:
                self.stopped = True
            elif fd == self._wake:
                with contextlib.suppress(OSError):
                    os.eventfd_read(self._wake)  # drained: one wake-up per burst of wakes
            else:
                out.append(fd)
        return out

    def pause(self, timeout: float) -> None:
        """Sleep ``timeout`` seconds whatever else is ready (only ``stop`` ends it)."""
        if timeout > 0 and not self.stopped and select.select([self._stop], [], [], timeout)[0]:
            self.stopped = True

    def wake(self) -> None:
        """End the current or next ``wait`` now (a pass is needed)."""
        with contextlib.suppress(OSError):
            os.eventfd_write(self._wake, 1)

    def stop(self) -> None:
        self.stopped = True
        with contextlib.suppress(OSError):
            os.eventfd_write(self._stop, 1)

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        for fd in (self._stop, self._wake):
            with contextlib.suppress(OSError):
                os.close(fd)
