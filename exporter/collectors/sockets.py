"""Listening TCP sockets of a process, from what the kernel shows (pure parsers).

A process's listening sockets are the ``socket:[INODE]`` links among its
``/proc/<pid>/fd/*`` matched against the LISTEN rows of ``/proc/<pid>/net/tcp`` and
``tcp6`` (the tables of that process's network namespace). Nothing here trusts a command
line: the kernel says which address and port a socket is bound to, and a process can bind
only addresses of its own network namespace.

Row format (net/ipv4/tcp_ipv4.c ``get_tcp4_sock``, net/ipv6/tcp_ipv6.c)::

    sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout
     0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0
                                                                         (inode) 51561 ...

Addresses are the in-kernel ``__be32`` words printed with ``%08X``, i.e. in the host's
byte order (IPv6: four such words); ports are plain hex; state ``0A`` is TCP_LISTEN.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Iterable
from dataclasses import dataclass

TCP_LISTEN = "0A"
MAX_ROWS = 65_536  # rows read from one table: a netns with more is cut there, not trusted


@dataclass(frozen=True, order=True)
class ListenSocket:
    """One listening TCP socket: where it is bound, as the kernel reports it."""

    inode: int
    address: str  # "0.0.0.0", "127.0.0.1", "::", "::1", "::ffff:127.0.0.1", "10.1.2.3"
    port: int

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return ipaddress.ip_address(self.address)

    @property
    def wildcard(self) -> bool:
        """Bound to every address of its namespace (0.0.0.0 or ::)."""
        return self.ip.is_unspecified

    @property
    def loopback_only(self) -> bool:
        """Reachable only from inside its own network namespace."""
        ip = self.ip
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            return ip.ipv4_mapped.is_loopback
        return ip.is_loopback


def _word(hex8: str) -> bytes:
    """One ``%08X`` word of an address, as network-order bytes."""
    raw = bytes.fromhex(hex8)
    return raw[::-1] if sys.byteorder == "little" else raw


def parse_address(field: str) -> tuple[str, int] | None:
    """``0100007F:1F40`` -> ("127.0.0.1", 8000); None when it is not an address."""
    host, sep, port = field.partition(":")
    if not sep or len(port) != 4 or len(host) not in (8, 32):
        return None
    try:
        packed = b"".join(_word(host[i: i + 8]) for i in range(0, len(host), 8))
        ip = ipaddress.ip_address(packed)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        # one spelling on every Python (3.11 prints ::ffff:af4:107, 3.13 ::ffff:10.244.1.7)
        return f"::ffff:{ip.ipv4_mapped}", int(port, 16)
    return str(ip), int(port, 16)


def parse_listening(text: str) -> list[ListenSocket]:
    """LISTEN rows of one ``/proc/<pid>/net/tcp`` or ``tcp6`` table; other rows, the
    header and malformed lines are skipped."""
    out = []
    for n, line in enumerate(text.splitlines()):
        if n > MAX_ROWS:
            break
        f = line.split()
        # sl local rem st tx:rx tr:when retrnsmt uid timeout inode
        if len(f) < 10 or f[3] != TCP_LISTEN or not f[9].isdigit():
            continue
        local = parse_address(f[1])
        inode = int(f[9])
        if local is None or inode == 0:
            continue
        out.append(ListenSocket(inode, local[0], local[1]))
    return out


def socket_inode(link: str) -> int | None:
    """The inode of a ``/proc/<pid>/fd/N`` link ``socket:[12345]``; None for anything else."""
    if not (link.startswith("socket:[") and link.endswith("]")):
        return None
    digits = link[len("socket:["): -1]
    return int(digits) if digits.isdigit() else None


def listening_of(
    fd_links: Iterable[str], tables: Iterable[ListenSocket]
) -> list[ListenSocket]:
    """The listening sockets among a process's open fds (by socket inode), sorted."""
    inodes = {i for i in map(socket_inode, fd_links) if i is not None}
    return sorted({s for s in tables if s.inode in inodes})
