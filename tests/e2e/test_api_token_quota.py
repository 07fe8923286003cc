"""A key's daily token quota holds under concurrency (issue 21, item 4): each model call reserves before it starts."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import psycopg

from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.processes import free_port, healthy

REPO = Path(__file__).resolve().parents[2]
QUOTA = 50


def _env(database_url: str, openai: OpenAIEmulator, prompt: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE")}
    env.update(
        PYTHONPATH=str(REPO), DATABASE_URL=database_url, LLM_BASE_URL=openai.base_url, LLM_API_KEY="sk-test",
        EMBEDDING_PROVIDER="none", API_ENABLED="true", SHUTDOWN_GRACE_S="1",
        # A prompt small enough that a 50-token day holds an answer: a short instruction and no tools offered.
        SYSTEM_PROMPT_FILE=str(prompt), LLM_MODEL_OVERRIDES='{"supports_tools": false}', **extra,
    )
    return env


async def test_fourteen_concurrent_requests_on_a_fifty_token_key_settle_within_it(
    database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    openai_emulator.script_fn(lambda body: Text("Within quota."))
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Answer briefly.", encoding="utf-8")
    create = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "keys", "create", "fifty", "--tokens-per-day", str(QUOTA),
        env=_env(database_url, openai_emulator, prompt), cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(create.communicate(), 120)
    assert create.returncode == 0, out.decode()
    secret = out.decode().strip().splitlines()[-1].strip()

    ports = [free_port(), free_port()]
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", env=_env(database_url, openai_emulator, prompt, HTTP_PORT=str(port)),
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

            async def ask(port: int, n: int, path: str, body: dict) -> tuple[int, dict]:
                async with http.post(f"http://127.0.0.1:{port}{path}", json=body,
                                     headers={"Authorization": f"Bearer {secret}"}) as response:
                    return response.status, await response.json()

            calls = []
            for n in range(14):
                if n % 2:
                    calls.append(ask(ports[n % 2], n, "/v1/chat/completions",
                                     {"model": "classic", "messages": [{"role": "user", "content": f"q{n}"}]}))
                else:
                    calls.append(ask(ports[n % 2], n, "/api/answer", {"question": f"q{n}"}))
            results = await asyncio.gather(*calls)
        statuses = [status for status, _ in results]
        assert set(statuses) <= {200, 429} and statuses.count(429) >= 1 and statuses.count(200) >= 1, results
        for status, body in results:
            if status == 429:
                assert body["error"]["type"] == "quota_exceeded", body
                assert body["error"]["message"].startswith(f"This key has used its {QUOTA} tokens for today"), body
        # Every call the model saw was told to stop within what was left of the day.
        assert all(0 < request["max_tokens"] <= QUOTA for request in openai_emulator.chat_requests)
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            cursor = await conn.execute(
                "SELECT u.tokens FROM api_key_usage u JOIN api_keys k ON k.id = u.key_id WHERE k.name = 'fifty'"
            )
            (settled,) = await cursor.fetchone()  # type: ignore[misc]
        answered = [body for status, body in results if status == 200]
        reported = sum(body["usage"]["total_tokens"] for body in answered)
        # Settled with the usage the model reported, and never past the quota however many ran at once.
        assert settled == reported and 0 < settled <= QUOTA, (settled, reported, statuses)
    finally:
        for process in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                await asyncio.wait_for(process.wait(), 30)
            except asyncio.TimeoutError:
                process.kill()
