"""A read whose Bookie was lost is sent again until the restarted Bookie answers: Ray fails
the calls made while it starts the new process, so a fixed count of immediate resends ran
out under load (pure: a scripted method, no Ray)."""

import asyncio
import time

import pytest

from leveled_ray.actors import remote
from leveled_ray.errors import StoreUnavailableError


class Restarting:
    """A method whose calls fail as unavailable until ``back_at`` (monotonic seconds)."""

    def __init__(self, back_after_s: float):
        self.back_at = time.monotonic() + back_after_s
        self.calls = 0

    def remote(self):
        self.calls += 1

        async def answer():
            if time.monotonic() < self.back_at:
                raise StoreUnavailableError("the actor is restarting")
            return "answered"
        return answer()


def test_a_read_is_sent_again_until_the_restarted_bookie_answers():
    method = Restarting(back_after_s=0.6)
    assert asyncio.run(remote.call_read(method)) == "answered"
    assert 3 <= method.calls < 20  # waits that grow: not a busy loop, not one long sleep


def test_a_read_gives_up_once_the_resend_time_has_passed(monkeypatch):
    monkeypatch.setattr(remote, "READ_RESEND_S", 0.3)
    method = Restarting(back_after_s=5.0)
    with pytest.raises(StoreUnavailableError):
        asyncio.run(remote.call_read(method))
    assert method.calls >= 3


def test_the_waits_grow_to_a_bound_and_end_with_the_time():
    waits = list(remote.resend_waits())
    assert waits[0] == remote.FIRST_RESEND_WAIT_S
    assert max(waits) == remote.MOST_RESEND_WAIT_S
    assert waits == sorted(waits) and sum(waits) <= remote.READ_RESEND_S
