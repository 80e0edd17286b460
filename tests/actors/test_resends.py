"""A read whose Bookie was lost is sent again until the restarted Bookie answers: Ray fails
the calls made while it starts the new process, so a fixed count of immediate resends ran
out under load; and Ray holds each such call a second or two before it fails it, so a
resend must not wait for the send before it (pure: scripted sends, no Ray)."""

import asyncio
import random
import time

import pytest

from leveled_ray.actors import remote
from leveled_ray.errors import InvalidArgumentError, StoreUnavailableError
from leveled_ray.testing.sim.loop import SimLoop, deterministic


def virtual(run):
    """``run()`` (a coroutine function) on the simulation's loop, where waits take virtual
    time, not real time: its result, and the virtual seconds it took."""
    loop = SimLoop(random.Random(0))
    try:
        with deterministic(loop, 0):
            return loop.run_until_complete(run()), loop.now
    finally:
        loop.close()


class Restarting:
    """A method whose calls fail as unavailable until ``back_at`` (monotonic seconds); a
    call made before then, but the first (the one that finds the Bookie lost), fails only
    ``held_s`` after it was made, as Ray holds a call sent to a restarting actor."""

    def __init__(self, back_after_s: float, held_s: float = 0.0):
        self.back_at = time.monotonic() + back_after_s
        self.held_s = held_s
        self.calls = 0

    def remote(self):
        self.calls += 1
        sent, held = time.monotonic(), self.held_s if self.calls > 1 else 0.0

        async def answer():
            if sent < self.back_at:
                await asyncio.sleep(held)
                raise StoreUnavailableError("the actor is restarting")
            return "answered"
        return answer()


def test_a_read_is_sent_again_until_the_restarted_bookie_answers():
    async def run():
        method = Restarting(back_after_s=0.6)
        return await remote.call_read(method), method.calls

    (answer, calls), took = virtual(run)
    assert answer == "answered" and 0.6 <= took <= 0.6 + remote.MOST_RESEND_WAIT_S
    assert 3 <= calls < 20  # waits that grow: not a busy loop, not one long sleep


def test_a_read_gives_up_once_the_resend_time_has_passed():
    method = None

    async def run():
        nonlocal method
        method = Restarting(back_after_s=3600.0)
        with pytest.raises(StoreUnavailableError):
            await remote.call_read(method)

    _, took = virtual(run)
    assert remote.READ_RESEND_S - remote.MOST_RESEND_WAIT_S <= took <= remote.READ_RESEND_S
    assert method.calls >= remote.READ_RESEND_S / remote.MOST_RESEND_WAIT_S


def test_a_resend_does_not_wait_for_the_held_sends_before_it():
    # Sends made while the Bookie restarts fail only 2 s later: the read is answered within
    # one wait of its return all the same, from a send made after it.
    async def run():
        return await remote.call_read(Restarting(back_after_s=0.5, held_s=2.0))

    answer, took = virtual(run)
    assert answer == "answered" and took <= 0.5 + remote.MOST_RESEND_WAIT_S


def test_a_resend_answered_with_another_error_raises_it():
    async def send():
        raise InvalidArgumentError("bad key")
    with pytest.raises(InvalidArgumentError):
        asyncio.run(remote.resent(send, StoreUnavailableError("lost")))


def test_the_waits_grow_to_a_bound_and_end_with_the_time():
    waits = list(remote.resend_waits())
    assert waits[0] == remote.FIRST_RESEND_WAIT_S
    assert max(waits) == remote.MOST_RESEND_WAIT_S
    assert waits == sorted(waits) and sum(waits) <= remote.READ_RESEND_S
