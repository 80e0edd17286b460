"""Synchronous folds run each step on their own event loop (``read/fold.py``): Ctrl-C during a
step ends the fold with ``KeyboardInterrupt`` and releases it, whichever thread the signal
lands on, and the SIGINT handler is the default again after every step. Synchronous calls
(``files/sync.py``) are interrupted the same way (pure asyncio, no store)."""

import os
import signal
import threading

import pytest

from leveled_ray.files.sync import run_sync
from leveled_ray.read.fold import iterate


def batches(stall: threading.Event | None = None, ended: list | None = None):
    async def gen():
        import asyncio

        try:
            for i in range(3):
                if stall is not None and i == 1:
                    stall.set()
                    # Blocks until Ctrl-C cancels this step (a fold that slept through it
                    # fails here, rather than hanging the test run).
                    await asyncio.wait_for(asyncio.Event().wait(), 60)
                yield [i * 10 + j for j in range(10)]
        finally:
            if ended is not None:
                ended.append(threading.current_thread().name)
    return gen


def test_a_fold_hands_out_every_item_and_leaves_sigint_alone():
    released = []
    assert list(iterate(batches(), flatten=True, on_close=lambda: released.append(1))) == \
        list(range(30))
    assert released == [1]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    out = []
    worker = threading.Thread(target=lambda: out.extend(iterate(batches(), flatten=False)))
    worker.start()
    worker.join(30)
    assert out == [list(range(10)), list(range(10, 20)), list(range(20, 30))]


def ctrl_c_when(ready: threading.Event, to: str, ended: threading.Event) -> list:
    """Sends Ctrl-C once ``ready`` is set: to the process, or to a thread other than the
    main one (where Python's handler alone would sleep through it). If ``ended`` is not set
    within 30 s, sends it to the main thread again, so that a test fails instead of
    hanging; the list it returns then holds ``True``."""
    rescued: list[bool] = []

    def send():
        if not ready.wait(30):
            return
        if to == "the process":
            os.kill(os.getpid(), signal.SIGINT)
        else:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        if not ended.wait(30):
            rescued.append(True)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=send, daemon=True).start()
    return rescued


def wakeup_fd() -> int:
    fd = signal.set_wakeup_fd(-1)  # reading it means setting it: put it straight back
    signal.set_wakeup_fd(fd)
    return fd


WAKEUP_FD = wakeup_fd()  # as the session had it before these tests


def assert_signals_restored():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert wakeup_fd() == WAKEUP_FD  # the wakeup fd was put back


@pytest.mark.parametrize("to", ["the process", "another thread"])
def test_ctrl_c_during_a_step_interrupts_and_releases_the_fold(to):
    released, stall, ended = [], threading.Event(), threading.Event()
    fold = iterate(batches(stall), flatten=True, on_close=lambda: released.append(1))
    rescued = ctrl_c_when(stall, to, ended)
    seen = []
    try:
        with pytest.raises(KeyboardInterrupt):
            for item in fold:
                seen.append(item)
    finally:
        ended.set()
    assert not rescued, "the fold slept through a Ctrl-C"
    assert seen == list(range(10)) and released == [1]
    assert_signals_restored()


@pytest.mark.parametrize("to", ["the process", "another thread"])
def test_ctrl_c_interrupts_a_synchronous_call(to):
    """The synchronous API's calls (``run_sync``) are interrupted the same way."""
    started, ended, cancelled = threading.Event(), threading.Event(), []

    async def waits_forever():
        import asyncio

        started.set()
        try:
            await asyncio.wait_for(asyncio.Event().wait(), 60)  # fails, rather than hangs
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    rescued = ctrl_c_when(started, to, ended)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_sync(waits_forever())
    finally:
        ended.set()
    assert not rescued, "the call slept through a Ctrl-C"
    assert cancelled == [True]
    assert_signals_restored()


def test_a_fold_ends_when_closed_broken_out_of_or_dropped_unstarted():
    """Closing ends the fold before ``close()`` returns; a fold dropped (a ``for`` loop broken
    out of, or one never started) is ended by the closer thread."""
    ended, released = [], []
    fold = iterate(batches(ended=ended), flatten=True, on_close=lambda: released.append(1))
    assert next(fold) == 0
    fold.close()
    assert released == [1] and ended == [threading.current_thread().name]
    for how in ("broken out of", "never started"):
        ended, done = [], threading.Event()
        fold = iterate(batches(ended=ended), flatten=True, on_close=done.set)
        if how == "broken out of":
            for item in fold:
                assert item == 0
                break
        del fold
        assert done.wait(30), how
        assert ended == (["lr-fold-closer"] if how == "broken out of" else []), how


def test_a_second_ctrl_c_ends_a_step_that_does_not_stop_at_once():
    """A step that takes the first Ctrl-C's cancellation in its stride: a second Ctrl-C
    raises ``KeyboardInterrupt`` at once, and the fold still ends and is released."""
    stall, swallowed, ended, released = threading.Event(), threading.Event(), [], []

    def stubborn():
        async def gen():
            import asyncio

            try:
                yield [0]
                stall.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    swallowed.set()
                    await asyncio.Event().wait()  # cancelled when the fold is closed
                yield [1]
            finally:
                ended.append(True)
        return gen()

    def two_ctrl_cs():
        for ready in (stall, swallowed):
            if not ready.wait(30):
                return
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=two_ctrl_cs, daemon=True).start()
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for item in iterate(stubborn, flatten=True, on_close=lambda: released.append(1)):
            seen.append(item)
    assert seen == [0] and swallowed.is_set() and ended == [True] and released == [1]
    assert_signals_restored()


def test_a_step_handler_put_back_after_its_call_acts_as_the_default_and_heals():
    """Code that saved the handler a call installed and put it back after the call ended
    (as a library that defers SIGINT may) leaves a finished call's handler: Ctrl-C still
    raises ``KeyboardInterrupt``, and the next call leaves Python's default again."""
    import asyncio

    async def handler_during_the_call():
        await asyncio.sleep(0)
        return signal.getsignal(signal.SIGINT)

    stale = run_sync(handler_during_the_call())
    assert stale is not signal.default_int_handler
    signal.signal(signal.SIGINT, stale)  # put back late
    try:
        with pytest.raises(KeyboardInterrupt):
            stale(signal.SIGINT, None)
        assert run_sync(handler_during_the_call()) not in (stale, signal.default_int_handler)
        assert_signals_restored()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
