"""Clients that misbehave, on raw sockets to a server on 127.0.0.1: ones that stop
reading (a laptop lid closed mid-stream) and ones that flood (a buggy or hostile
script). Blocking sockets, for tests whose server runs in a thread."""

from __future__ import annotations

import base64
import os
import socket
import struct
from collections.abc import Iterator

#: A receive buffer small enough that a client which stops reading stops the server's
#: writes after little data (the kernel doubles it).
SMALL_RCVBUF = 4096


def connect(port: int, *, rcvbuf: int | None = SMALL_RCVBUF) -> socket.socket:
    """A TCP connection to 127.0.0.1:``port`` (its receive buffer set before connecting,
    so the window it offers stays that small)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def read_until(sock: socket.socket, marker: bytes, limit: int = 1 << 20) -> bytes:
    """Read until ``marker`` has arrived; everything read."""
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before {marker!r}: {data[-200:]!r}")
        data += chunk
        if len(data) > limit:
            raise AssertionError(f"no {marker!r} in {limit} bytes")
    return data


def read_to_end(sock: socket.socket) -> bytes:
    """Read until the server closes the connection (``socket.timeout`` if it does not)."""
    parts = []
    while chunk := sock.recv(65536):
        parts.append(chunk)
    return b"".join(parts)


def sse_open(port: int, query: str, *, rcvbuf: int | None = SMALL_RCVBUF) -> socket.socket:
    """``GET /?<query>`` as an SSE client, read up to the end of the response's head,
    which is all it reads unless told to."""
    sock = connect(port, rcvbuf=rcvbuf)
    sock.sendall(f"GET /?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = read_until(sock, b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return sock


def ws_open(
    port: int, *, rcvbuf: int | None = SMALL_RCVBUF, subprotocol: str | None = None
) -> socket.socket:
    """A WebSocket handshake on a raw socket; the socket, ready for :func:`ws_text`."""
    sock = connect(port, rcvbuf=rcvbuf)
    key = base64.b64encode(os.urandom(16)).decode()
    extra = f"Sec-WebSocket-Protocol: {subprotocol}\r\n" if subprotocol else ""
    sock.sendall(
        (
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        ).encode()
    )
    head = read_until(sock, b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head[:200]
    assert head.endswith(b"\r\n\r\n"), "nothing is sent before the client speaks"
    return sock


def ws_text(text: str) -> bytes:
    """One masked text frame (what a client sends)."""
    payload = text.encode()
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x81, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


def ws_frames(sock: socket.socket) -> Iterator[tuple[int, bytes]]:
    """The server's frames as (opcode, payload), until it closes the connection."""
    buf = b""

    def need(n: int) -> bytes:
        nonlocal buf
        while len(buf) < n:
            chunk = sock.recv(65536)
            if not chunk:
                raise EOFError
            buf += chunk
        out, buf = buf[:n], buf[n:]
        return out

    try:
        while True:
            first, second = need(2)
            n = second & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", need(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", need(8))
            yield first & 0x0F, need(n)
    except EOFError:
        return


def ws_close_code(sock: socket.socket) -> int | None:
    """Read the server's frames to the end: its close code, or None without a close frame."""
    for opcode, payload in ws_frames(sock):
        if opcode == 0x8:
            return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
    return None
