"""How the change feed groups journal files into spans, and how it reads a group at once
(pure: no store)."""

import asyncio
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveled_ray.files.sync import gather_or_cancel
from leveled_ray.read.changes import file_groups


@given(st.lists(st.integers(1, 100), max_size=40), st.integers(1, 150), st.integers(1, 6))
def test_file_groups_keep_order_and_fill_each_span_as_far_as_it_goes(sizes, span, most):
    files = [SimpleNamespace(size=s, n=i) for i, s in enumerate(sizes)]
    groups = file_groups(files, span, most)
    assert [f for g in groups for f in g] == files  # every file once, in order
    for group in groups:
        assert 1 <= len(group) <= most
        assert len(group) == 1 or sum(f.size for f in group) <= span
    for group, after in zip(groups, groups[1:]):  # a group ends only when the next is full
        assert len(group) == most or sum(f.size for f in group) + after[0].size > span


def test_a_failure_cancels_the_other_reads_and_is_raised_as_itself():
    ended = []

    async def slow(name):
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    async def failing():
        await asyncio.sleep(0)
        raise ConnectionError("the second read failed")

    async def run():
        with pytest.raises(ConnectionError, match="second read"):
            await gather_or_cancel(slow("a"), failing(), slow("c"))
        return sorted(ended)  # both ended before the error was raised

    assert asyncio.run(run()) == ["a", "c"]


def test_results_come_in_the_order_asked():
    async def after(delay, value):
        await asyncio.sleep(delay)
        return value

    assert asyncio.run(gather_or_cancel(after(0.02, 1), after(0, 2), after(0.01, 3))) == [
        1, 2, 3]
