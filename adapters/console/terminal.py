"""The terminal under `relaybot chat`: lines read from stdin on the event loop, and Ctrl-C handed to the chat."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

READ_BYTES = 4096


class TerminalInput:
    """Lines from a file descriptor, read when the loop says it is readable: no thread sits blocked in input(),
    so Ctrl-C can end the chat at a prompt. A terminal in its usual (canonical) mode still edits the line."""

    def __init__(self, *, fd: int | None = None, out: TextIO | None = None) -> None:
        self._fd = sys.stdin.fileno() if fd is None else fd
        self._out = out or sys.stdout
        self._buffer = bytearray()
        self._ended = False

    async def read_line(self, prompt: str) -> str | None:
        """Show `prompt` and return the next line (without its newline); None once the input has ended."""
        self._out.write(prompt)
        self._out.flush()
        while b"\n" not in self._buffer and not self._ended:
            self._take(await self._read())
        return self._pop()

    async def _read(self) -> bytes | None:
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        try:
            loop.add_reader(self._fd, lambda: readable.done() or readable.set_result(None))
        except PermissionError:
            # A regular file (`relaybot chat < questions.txt`) cannot be watched, and a read of it never waits.
            return await asyncio.to_thread(_read_some, self._fd)
        try:
            await readable
        finally:
            loop.remove_reader(self._fd)
        return _read_some(self._fd)

    def _take(self, data: bytes | None) -> None:
        if data is None:
            return
        if data:
            self._buffer += data
        else:
            self._ended = True

    def _pop(self) -> str | None:
        if b"\n" in self._buffer:
            line, _, rest = bytes(self._buffer).partition(b"\n")
            self._buffer = bytearray(rest)
        elif self._buffer:
            line, self._buffer = bytes(self._buffer), bytearray()  # the last line, without a newline
        else:
            return None
        return line.decode("utf-8", errors="replace").rstrip("\r")


def _read_some(fd: int) -> bytes | None:
    """What the descriptor has now: b"" once the input has ended, None when a wake-up found nothing to read."""
    try:
        return os.read(fd, READ_BYTES)
    except BlockingIOError:
        return None
    except OSError:
        return b""  # the terminal went away (EIO once its other end closed): the input has ended


@contextmanager
def ctrl_c_calls(callback: Callable[[], None]) -> Iterator[None]:
    """While inside, Ctrl-C (SIGINT) calls `callback` on the running loop instead of raising KeyboardInterrupt."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, callback)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
