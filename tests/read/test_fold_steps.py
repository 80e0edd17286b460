"""Synchronous folds run each step on their own event loop (``read/fold.py``): Ctrl-C during a
step ends the fold with ``KeyboardInterrupt`` and releases it, and the SIGINT handler is
the default again after every step (pure asyncio, no store)."""

import os
import signal
import threading

import pytest

from leveled_ray.read.fold import iterate


def batches(stall: threading.Event | None = None, ended: list | None = None):
    async def gen():
        import asyncio

        try:
            for i in range(3):
                if stall is not None and i == 1:
                    stall.set()
                    await asyncio.Event().wait()  # blocks until Ctrl-C cancels this step
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


def test_ctrl_c_during_a_step_interrupts_and_releases_the_fold():
    released, stall = [], threading.Event()
    fold = iterate(batches(stall), flatten=True, on_close=lambda: released.append(1))
    threading.Thread(target=lambda: stall.wait(30) and os.kill(os.getpid(), signal.SIGINT),
                     daemon=True).start()
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for item in fold:
            seen.append(item)
    assert seen == list(range(10)) and released == [1]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


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
