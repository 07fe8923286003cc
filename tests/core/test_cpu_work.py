"""Input-sized CPU work runs in worker threads, at most CPU_WORK_AT_ONCE together, whatever arrives at once."""

from __future__ import annotations

import asyncio
import threading

from core import cpu_work


async def test_no_more_than_cpu_work_at_once_run_together_and_each_runs_off_the_loop() -> None:
    running = 0
    most = 0
    lock = threading.Lock()
    release = threading.Event()
    loop_thread = threading.get_ident()
    threads: set[int] = set()

    def work(n: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            threads.add(threading.get_ident())
        release.wait(10)
        with lock:
            running -= 1
        return n * 2

    jobs = [asyncio.create_task(cpu_work.in_worker(work, n)) for n in range(cpu_work.CPU_WORK_AT_ONCE * 3)]
    while True:
        with lock:
            if running == cpu_work.CPU_WORK_AT_ONCE:
                break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # had the gate let more through, they would be running by now
    with lock:
        assert running == cpu_work.CPU_WORK_AT_ONCE
    release.set()
    assert await asyncio.gather(*jobs) == [n * 2 for n in range(cpu_work.CPU_WORK_AT_ONCE * 3)]
    assert most == cpu_work.CPU_WORK_AT_ONCE
    assert loop_thread not in threads
