"""A ZMTP 3.0 client (the ZeroMQ wire protocol, rfc.zeromq.org/spec/23) for the two
sockets headroom opens to a vLLM: SUB to its KV-event publisher, DEALER to its replay
ROUTER. NULL security only, as vLLM's ``ZmqEventPublisher`` binds them.

Why not libzmq: its ``ZMQ_MAXMSGSIZE`` bounds each *frame*, not a message, and its
high-water mark counts whole messages: a publisher the pod controls sent one message of
400 frames of 512 KiB and a SUB socket with MAXMSGSIZE 1 MiB and RCVHWM 2 took it whole
(200 MiB). Here every byte read is bounded before it is read: a frame's size is checked
against ``Limits.max_frame`` from its header, the frames of one message against
``max_frames`` and ``max_message``, and a peer that breaks them is disconnected
(``ZmtpLimitError``). The stream reader pauses the socket past 128 KiB buffered, so a
connection holds at most one message being read plus that.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

SIGNATURE = b"\xff" + b"\x00" * 8 + b"\x7f"
MORE, LONG, COMMAND = 0x01, 0x02, 0x04
READ_BUFFER = 64 << 10  # the stream reader pauses the socket past twice this


class ZmtpError(Exception):
    """The peer is not a ZMTP 3 socket of the expected type, or the connection broke."""


class ZmtpLimitError(ZmtpError):
    """The peer sent more than ``Limits`` allow: disconnected before reading it."""


@dataclass(frozen=True)
class Limits:
    max_frame: int = 2 << 20  # bytes in one frame (vLLM's real batches: a few 100 KiB)
    max_frames: int = 4  # frames in one message (vLLM sends 3, a replay reply 4)
    max_message: int = (2 << 20) + 4096  # bytes in one message, all frames


def greeting() -> bytes:
    """Our 64-byte greeting: version 3.0, mechanism NULL, not as-server."""
    return SIGNATURE + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def check_greeting(raw: bytes) -> None:
    if len(raw) != 64 or raw[0] != 0xFF or raw[9] != 0x7F:
        raise ZmtpError("not a ZMTP greeting")
    if raw[10] < 3:
        raise ZmtpError(f"ZMTP version {raw[10]} (3 needed)")
    if raw[12:32].rstrip(b"\x00") != b"NULL":
        raise ZmtpError(f"security mechanism {raw[12:32].rstrip(bytes(1))[:20]!r}")


def frame(body: bytes, *, more: bool = False, command: bool = False) -> bytes:
    flags = (MORE if more else 0) | (COMMAND if command else 0)
    if len(body) > 255:
        return bytes([flags | LONG]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def ready_command(socket_type: str) -> bytes:
    name = b"Socket-Type"
    value = socket_type.encode()
    body = b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(value)) + value
    return frame(body, command=True)


def ready_properties(body: bytes) -> dict[str, bytes]:
    """The properties of a READY command body (``ZmtpError`` when it is none)."""
    if not body or body[0] != 5 or body[1:6] != b"READY":
        raise ZmtpError("expected a READY command")
    props: dict[str, bytes] = {}
    i = 6
    while i < len(body):
        n = body[i]
        name = body[i + 1:i + 1 + n].decode("ascii", "replace")
        i += 1 + n
        if i + 4 > len(body):
            raise ZmtpError("truncated READY property")
        (size,) = struct.unpack(">I", body[i:i + 4])
        props[name.lower()] = body[i + 4:i + 4 + size]
        i += 4 + size
    return props


def tcp_endpoint(endpoint: str) -> tuple[str, int]:
    """``tcp://host:port`` (host may be ``[v6]``) -> (host, port)."""
    if not endpoint.startswith("tcp://"):
        raise ValueError(f"not a tcp:// endpoint: {endpoint[:80]!r}")
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    if not port.isdigit() or not host:
        raise ValueError(f"no host:port in {endpoint[:80]!r}")
    return host.strip("[]"), int(port)


PEERS = {"SUB": {b"PUB", b"XPUB"}, "DEALER": {b"ROUTER", b"DEALER"}}


@dataclass
class ZmtpConnection:
    """One ZMTP 3.0 connection, after the handshake; ``recv`` is bounded by ``limits``."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    limits: Limits

    @classmethod
    async def open(cls, endpoint: str, socket_type: str, *, timeout: float,
                   limits: Limits | None = None) -> ZmtpConnection:
        """Connect and handshake within ``timeout`` seconds (``OSError``, ``ZmtpError``
        or ``TimeoutError`` otherwise)."""
        host, port = tcp_endpoint(endpoint)
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=READ_BUFFER), timeout)
        conn = cls(reader, writer, limits or Limits())
        try:
            await asyncio.wait_for(conn._handshake(socket_type), timeout)
        except BaseException:
            conn.close()
            raise
        return conn

    async def _handshake(self, socket_type: str) -> None:
        self.writer.write(greeting() + ready_command(socket_type))
        await self.writer.drain()
        check_greeting(await self._read(64))
        flags, body = await self._frame()
        if not flags & COMMAND:
            raise ZmtpError("expected READY, got a message")
        peer = ready_properties(body).get("socket-type", b"")
        if peer not in PEERS[socket_type]:
            raise ZmtpError(f"peer is a {peer[:16]!r} socket, not one a {socket_type} "
                            f"talks to")

    async def send(self, frames: Sequence[bytes]) -> None:
        for i, body in enumerate(frames):
            self.writer.write(frame(body, more=i < len(frames) - 1))
        await self.writer.drain()

    async def recv(self) -> list[bytes]:
        """The next message (commands such as PING are skipped); ``ZmtpLimitError`` before
        reading a frame or message beyond the limits."""
        frames: list[bytes] = []
        total = 0
        while True:
            flags, body = await self._frame(self.limits.max_message - total)
            if flags & COMMAND:
                if frames:
                    raise ZmtpError("command inside a message")
                continue
            frames.append(body)
            total += len(body)
            if not flags & MORE:
                return frames
            if len(frames) >= self.limits.max_frames:
                raise ZmtpLimitError(f"message of more than {self.limits.max_frames} frames")

    async def _frame(self, room: int | None = None) -> tuple[int, bytes]:
        head = await self._read(2)
        flags = head[0]
        if flags & ~(MORE | LONG | COMMAND):
            raise ZmtpError(f"frame flags {flags:#x}")
        size = head[1]
        if flags & LONG:
            (size,) = struct.unpack(">Q", bytes(head[1:2]) + await self._read(7))
        cap = self.limits.max_frame if room is None else min(self.limits.max_frame, room)
        if size > cap:
            raise ZmtpLimitError(f"frame of {size} bytes (cap {cap})")
        return flags, await self._read(size)

    async def _read(self, n: int) -> bytes:
        try:
            return await self.reader.readexactly(n)
        except asyncio.IncompleteReadError as exc:
            raise ZmtpError("connection closed by the peer") from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
