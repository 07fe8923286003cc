"""A key's daily quota holds across two `relaybot run` processes sharing one database."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp

from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.processes import free_port, healthy

REPO = Path(__file__).resolve().parents[2]


def _env(database_url: str, openai: OpenAIEmulator, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE")}
    env.update(
        PYTHONPATH=str(REPO), DATABASE_URL=database_url, LLM_BASE_URL=openai.base_url, LLM_API_KEY="sk-test",
        EMBEDDING_PROVIDER="none", API_ENABLED="true", SHUTDOWN_GRACE_S="1", **extra,
    )
    return env


async def test_twenty_concurrent_requests_over_two_processes_take_exactly_ten(
    database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    openai_emulator.script_fn(lambda body: Text("Within quota."))
    create = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "keys", "create", "ten", "--requests-per-day", "10",
        env=_env(database_url, openai_emulator), cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(create.communicate(), 120)
    assert create.returncode == 0, out.decode()
    secret = out.decode().strip().splitlines()[-1].strip()

    ports = [free_port(), free_port()]
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", env=_env(database_url, openai_emulator, HTTP_PORT=str(port)),
            cwd=tmp_path, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )
        for port in ports
    ]
    try:
        for _ in range(300):
            if all([await healthy(port) for port in ports]):
                break
            await asyncio.sleep(0.1)
        assert all([await healthy(port) for port in ports]), "the two processes did not come up"
        async with aiohttp.ClientSession() as http:

            async def ask(port: int, n: int) -> int:
                async with http.post(
                    f"http://127.0.0.1:{port}/api/answer", json={"question": f"q{n}"},
                    headers={"Authorization": f"Bearer {secret}"},
                ) as response:
                    await response.read()
                    return response.status

            statuses = await asyncio.gather(*(ask(ports[n % 2], n) for n in range(20)))
        assert statuses.count(200) == 10 and statuses.count(429) == 10, statuses
        assert len(openai_emulator.chat_requests) == 10
    finally:
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                await asyncio.wait_for(process.wait(), 30)
            except asyncio.TimeoutError:
                process.kill()
