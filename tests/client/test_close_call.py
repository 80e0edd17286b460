"""A store's close, as the client sends it (client/calls.py), without Ray: the actor is ended
only once its Bookie has closed, or is gone."""

import asyncio

import leveled_ray as lr
from leveled_ray.client.calls import Call


def _close(answers: list, killed: list, tries: int = 5) -> Call:
    """A close whose sends are answered by ``answers`` in turn (an exception: raised)."""
    async def send():
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return Call(send(), killed.append, closing=True,
                again=(lambda: _close(answers, killed, tries - 1)) if tries > 1 else None)


def test_a_close_lost_on_its_way_is_sent_again_before_the_actor_is_ended():
    """A Bookie lost during the close may not have had it, and may still hold writes it took
    and has not answered: ending its actor then would fail those writes as "closed" (which
    says nothing was written), so the close is sent again first."""
    async def run():
        answers = [lr.StoreUnavailableError("lost"), lr.StoreUnavailableError("lost"), None]
        killed: list = []
        await _close(answers, killed).run_async()
        assert answers == [] and killed == [None]  # three sends, then the end of the actor

        gone = [lr.StoreClosedError("the actor is gone")]
        killed = []
        await _close(gone, killed).run_async()
        assert gone == [] and killed == [None]  # gone already: closed, sent once

        lost = [lr.StoreUnavailableError("lost")] * 2
        killed = []
        await _close(lost, killed, tries=2).run_async()
        assert lost == [] and killed == [None]  # its tries spent: ended all the same

    asyncio.run(run())
