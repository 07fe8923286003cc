"""A child process on a pseudo-terminal, as a person's terminal runs it: what it shows, what is typed."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import termios

# Bounds on waiting for the screen, never a measure of anything: a slow machine just waits longer.
SCREEN_WAIT_S = 90.0
EXIT_WAIT_S = 60.0
CTRL_C = b"\x03"


class Terminal:
    """The chat process with a pseudo-terminal as its controlling terminal, stdin, stdout and stderr."""

    def __init__(self, process: subprocess.Popen[bytes], master: int) -> None:
        self.process = process
        self.master = master
        self.screen = ""
        self._seen = 0  # where the next expect() starts looking
        self._changed = asyncio.Event()
        os.set_blocking(master, False)
        asyncio.get_running_loop().add_reader(master, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # EIO: the process closed its end
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.master)
        self.screen += data.decode("utf-8", errors="replace")
        self._changed.set()

    async def expect(self, text: str) -> str:
        """Wait until `text` shows after what was already expected; what was printed up to it."""
        async def shown() -> str:
            while (at := self.screen.find(text, self._seen)) < 0:
                self._changed.clear()
                await self._changed.wait()
            part, self._seen = self.screen[self._seen:at + len(text)], at + len(text)
            return part

        try:
            return await asyncio.wait_for(shown(), SCREEN_WAIT_S)
        except TimeoutError:
            raise AssertionError(f"{text!r} never showed; the screen:\n{self.screen}") from None

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    async def exit_code(self) -> int:
        return await asyncio.wait_for(asyncio.to_thread(self.process.wait), EXIT_WAIT_S)


def take_the_terminal() -> None:
    # Run in the child after setsid(): the pty becomes its controlling terminal, so Ctrl-C typed there is SIGINT.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
