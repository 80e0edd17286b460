"""Waiting for a condition, and killing a process or an actor at a chosen point."""

from __future__ import annotations

from . import REPO_ROOT


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05):
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


async def until(predicate, timeout: float = 30.0, interval: float = 0.01):
    """:func:`wait_until` on the running event loop: poll ``predicate`` (a function, or one
    returning an awaitable) until it is true, letting the loop run between looks; fail the
    test after ``timeout`` seconds. Returns the true value."""
    import asyncio
    import inspect
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def run_until_ready_then_kill(script: str, *args: str) -> None:
    """Run ``script`` in a new Python process until it prints ``READY``, then kill it with
    SIGKILL (no cleanup of any kind): a client or driver that dies at a chosen point."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                               text=True, cwd=REPO_ROOT.parent)
    try:
        assert process.stdout.readline().strip() == "READY"
    finally:
        process.kill()
        process.wait()


def kill_actor(handle) -> None:
    """Kill an actor (no cleanup, no restart) and wait until calls to it fail: a kill takes
    effect a little later, and a call sent meanwhile may still be answered."""
    import ray

    ray.kill(handle, no_restart=True)

    def dead() -> bool:
        try:
            ray.get(handle.__ray_ready__.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return True
        return False

    wait_until(dead, timeout=30)
