"""Bad input to the history API is refused with InvalidArgumentError before anything is read:
points in time, listeners and readers. Without Ray."""

import asyncio

import pytest

import leveled_ray as lr
from leveled_ray.client.listen import Listener
from leveled_ray.client.reader import Reader
from leveled_ray.client.snapshot import Snapshot
from leveled_ray.read.history_view import as_of, sqn_at_time


class NoStore:
    """A store that must not be called."""

    def __getattr__(self, name):
        raise AssertionError(f"called {name}")


@pytest.mark.parametrize("at", [{}, {"at_sqn": 3, "at_time": 4.0}])
def test_an_earlier_moment_is_one_sqn_or_one_time(at):
    with pytest.raises(lr.InvalidArgumentError, match="one of"):
        asyncio.run(as_of(NoStore(), **at))


def test_a_time_is_a_number_and_a_snapshot_without_values_cannot_go_back():
    with pytest.raises(lr.InvalidArgumentError, match="Unix seconds"):
        asyncio.run(sqn_at_time(NoStore(), "yesterday"))
    snap = Snapshot(NoStore(), "snap-x", float("inf"), values=False)
    with pytest.raises(lr.InvalidArgumentError, match="values"):
        asyncio.run(snap.go_back_async(at_sqn=1))


def test_a_reader_takes_at_most_one_moment():
    with pytest.raises(lr.InvalidArgumentError):
        Reader("memory://nowhere", at_sqn=1, at_time=2.0)


@pytest.mark.parametrize("kwargs", [
    {"after": -1}, {"after": "1"}, {"after": 0, "name": ""}, {"after": 0, "lifetime": 0},
    {"after": 0, "lifetime": "60"}, {"after": 0, "batch_size": 0},
])
def test_bad_listener_arguments_are_refused_before_any_call(kwargs):
    after = kwargs.pop("after")
    with pytest.raises(lr.InvalidArgumentError):
        Listener(NoStore(), after, **kwargs)


def test_a_closed_listener_refuses_to_poll():
    feed = Listener(NoStore(), 0)
    feed.close()  # it never held a lease: nothing to drop
    with pytest.raises(lr.InvalidArgumentError, match="closed"):
        feed.poll(timeout=0)


def test_poll_batch_refuses_while_iterated_changes_wait():
    feed = Listener(NoStore(), 0)
    feed._items.append("a change an iteration took")
    with pytest.raises(lr.InvalidArgumentError, match="iterat"):
        feed.poll_batch(timeout=0)
