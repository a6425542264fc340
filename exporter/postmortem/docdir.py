"""The flight recorder's directory, written as root on a node full of hostile pods.

The directory may be a hostPath another tenant can also write (or a volume a pod shares),
so every operation is relative to one directory descriptor and trusts nothing it finds:

- a document is written to a fresh temporary file, created with ``O_CREAT|O_EXCL|
  O_NOFOLLOW`` under a random name (a planted file or symlink is never opened), then
  hard-linked to its final name, which fails rather than replaces when that name exists
  (another name is tried); the temporary name is always removed, also on ENOSPC;
- pruning and listing see only regular files whose names headroom makes
  (``YYYYmmddTHHMMSSZ-...json``): other files, links, FIFOs and directories are neither
  deleted nor listed;
- reading opens with ``O_NOFOLLOW|O_NONBLOCK`` and serves a regular file only, up to a
  size limit.

What each rule stops (docs/threats.md, the flight-recorder directory): planted-symlinks
(writes followed planted symlinks: an outside file overwritten as root), foreign-files
(pruning deleted 11 foreign files and the newest document), full-disk (a full disk left
0-byte temporaries and colliding names) and index-junk (the index listed directories,
FIFOs and symlinks).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import stat
from pathlib import Path

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^\d{8}T\d{6}Z-[A-Za-z0-9_.-]{1,230}\.json$")
_TMP_RE = re.compile(r"^\.headroom-[0-9a-f]{16}\.tmp$")
MAX_DOCUMENT_BYTES = 16 << 20


class DocumentDir:
    def __init__(self, path: Path, max_documents: int = 50,
                 max_bytes: int = MAX_DOCUMENT_BYTES) -> None:
        self.path = path
        self.max_documents = max_documents
        self.max_bytes = max_bytes

    def _open_dir(self, create: bool) -> int:
        if create:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o750)
        return os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def write(self, name: str, data: bytes) -> str:
        """Store ``data`` under ``name`` (or ``<stem>-N.json`` when taken); returns the
        name used. Raises OSError (ENOSPC, EACCES...) with nothing left behind."""
        if not NAME_RE.match(name):
            raise ValueError(f"not a document name: {name!r}")
        dfd = self._open_dir(create=True)
        tmp = f".headroom-{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o640, dir_fd=dfd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            final = self._link_unique(dfd, tmp, name)
            self._prune(dfd)
            return final
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            os.close(dfd)

    def _link_unique(self, dfd: int, tmp: str, name: str) -> str:
        stem = name[: -len(".json")]
        for i in range(100):
            candidate = name if i == 0 else f"{stem}-{i}.json"
            try:
                os.link(tmp, candidate, src_dir_fd=dfd, dst_dir_fd=dfd,
                        follow_symlinks=False)
                return candidate
            except FileExistsError:
                continue  # never replace: a planted file, a link, or a same-ms kill
        raise OSError(errno.EEXIST, f"no free name for {name}")

    def _entries(self, dfd: int) -> list[str]:
        """Our document names that are regular files (not links, FIFOs, directories)."""
        out = []
        with os.scandir(dfd) as it:
            for e in it:
                if NAME_RE.match(e.name) and e.is_file(follow_symlinks=False):
                    out.append(e.name)
        return sorted(out)

    def _prune(self, dfd: int) -> None:
        names = self._entries(dfd)
        for old in names[: max(0, len(names) - self.max_documents)]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old, dir_fd=dfd)
        with os.scandir(dfd) as it:  # temporaries of a crashed write (ours by name)
            stale = [e.name for e in it
                     if _TMP_RE.match(e.name) and e.is_file(follow_symlinks=False)]
        for name in stale:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dfd)

    def names(self) -> list[str]:
        try:
            dfd = self._open_dir(create=False)
        except OSError:
            return []
        try:
            return self._entries(dfd)
        finally:
            os.close(dfd)

    def stamps(self) -> dict[str, tuple[int, int, int]]:
        """Our documents -> (inode, size, mtime in ns): what a cache of their contents
        is keyed on (a rewritten or replaced file has another stamp)."""
        try:
            dfd = self._open_dir(create=False)
        except OSError:
            return {}
        out = {}
        try:
            with os.scandir(dfd) as it:
                for e in it:
                    if not NAME_RE.match(e.name):
                        continue
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        out[e.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
        finally:
            os.close(dfd)
        return out

    def read(self, name: str) -> bytes | None:
        """The document's bytes; None unless it is one of ours and a regular file."""
        if not NAME_RE.match(name):
            return None
        try:
            dfd = self._open_dir(create=False)
        except OSError:
            return None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dfd)
        except OSError:
            return None
        finally:
            os.close(dfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_bytes:
                return None
            chunks = []
            left = self.max_bytes + 1
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            return data if len(data) <= self.max_bytes else None
        finally:
            os.close(fd)
