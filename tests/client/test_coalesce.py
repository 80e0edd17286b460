"""The client's write coalescer, without Ray: calls are sent by a fake whose results the test
gives by hand."""

import asyncio
import threading
import time
from concurrent.futures import Future

import pytest
from support.waits import until, wait_until

import leveled_ray as lr
from leveled_ray.client.coalesce import Coalescer


class FakeBookie:
    """Records each call's parts; the test completes the calls."""

    def __init__(self, fail_send=0):
        self.calls: list[tuple[list, Future]] = []
        self.fail_send = fail_send

    def send(self, parts):
        if self.fail_send:
            self.fail_send -= 1
            raise lr.StoreClosedError("not sent")
        done = Future()
        self.calls.append(([p.changes for p in parts], done))
        return done

    def answer(self, i, sqn=100):
        """Each part of call ``i`` gets consecutive SQNs; a part ``["bad"]`` fails alone."""
        parts, done = self.calls[i]
        results = []
        for changes in parts:
            if changes == ["bad"]:
                results.append(lr.ConditionFailedError("bad", ()))
            else:
                results.append(sqn)
                sqn += len(changes)
        done.set_result(results)


def coalescer(bookie, max_changes=100, max_bytes=1 << 20, linger_s=0.0, gap_s=0.0):
    return Coalescer(bookie.send, max_changes=max_changes, max_bytes=max_bytes,
                          linger_s=linger_s, gap_s=gap_s)


def wait_for(condition, timeout=5.0):
    wait_until(condition, timeout, interval=0.001)


def test_a_lone_write_goes_at_once_and_later_ones_wait_for_the_next_call_in_order():
    bookie = FakeBookie()
    c = coalescer(bookie)
    first = c.submit(["a"], [b"1"], 1)
    assert [p for p, _ in bookie.calls] == [[["a"]]]  # sent at once, alone
    later = [c.submit([k], [b"v"], 1) for k in ("b", "bad", "c")]
    assert len(bookie.calls) == 1  # they wait while the first call is in flight
    bookie.answer(0, sqn=1)
    assert first.result() == 1
    assert bookie.calls[1][0] == [["b"], ["bad"], ["c"]]  # together, in submission order
    bookie.answer(1, sqn=2)
    assert later[0].result() == 2 and later[2].result() == 3
    with pytest.raises(lr.ConditionFailedError):
        later[1].result()  # its own failure only
    assert c.counters == {"calls": 2, "parts": 4, "lingered": 0}
    c.submit(["d"], [b"v"], 1)
    assert len(bookie.calls) == 3  # idle again: sent at once


def test_calls_keep_to_their_limits():
    bookie = FakeBookie()
    c = coalescer(bookie, max_changes=3, max_bytes=10)
    c.submit(["a"], [b"v"], 1)
    for k in "bcdef":
        c.submit([k], [b"v"], 1)
    c.submit(["g", "h"], [b"v", b"v"], 2)
    c.submit(["big"], [b"v"], 50)  # over max_bytes alone: it still goes, on its own
    bookie.answer(0)
    bookie.answer(1)
    bookie.answer(2)
    bookie.answer(3)
    assert [p for p, _ in bookie.calls] == [
        [["a"]], [["b"], ["c"], ["d"]], [["e"], ["f"]], [["g", "h"]], [["big"]]]


def test_an_error_of_the_whole_call_reaches_every_part_and_the_next_call_still_goes():
    bookie = FakeBookie()
    c = coalescer(bookie)
    c.submit(["a"], [b"v"], 1)
    waiting = [c.submit([k], [b"v"], 1) for k in "bc"]
    bookie.calls[0][1].set_exception(lr.FencedError("fenced", epoch=1, current_epoch=2))
    bookie.calls[1][1].set_exception(lr.ObjectStoreError("lost", definite=True))
    for future in waiting:
        with pytest.raises(lr.ObjectStoreError):
            future.result()
    after = c.submit(["d"], [b"v"], 1)
    bookie.answer(2, sqn=9)
    assert after.result() == 9


def test_a_call_that_cannot_be_sent_fails_its_parts_only():
    bookie = FakeBookie(fail_send=1)
    c = coalescer(bookie)
    with pytest.raises(lr.StoreClosedError):
        c.submit(["a"], [b"v"], 1).result()
    ok = c.submit(["b"], [b"v"], 1)
    bookie.answer(0, sqn=5)
    assert ok.result() == 5


def test_asyncio_callers_in_order_and_a_cancelled_wait_is_never_sent():
    bookie = FakeBookie()
    c = coalescer(bookie)

    async def main():
        loop = asyncio.get_running_loop()
        first = c.submit(["a"], [b"v"], 1, loop=loop)
        gave_up = c.submit(["x"], [b"v"], 1, loop=loop)
        kept = c.submit(["b"], [b"v"], 1, loop=loop)
        gave_up.cancel()
        # The answer comes from another thread, as Ray's callbacks do.
        threading.Thread(target=bookie.answer, args=(0, 1)).start()
        assert await first == 1
        # the next call goes once the answering thread has delivered
        await until(lambda: len(bookie.calls) == 2, timeout=1, interval=0.001)
        assert bookie.calls[1][0] == [["b"]]  # the cancelled part was dropped
        threading.Thread(target=bookie.answer, args=(1, 2)).start()
        assert await kept == 2

    asyncio.run(main())


def test_many_threads_share_calls():
    bookie = FakeBookie()
    c = coalescer(bookie)
    results = {}

    def writer(i):
        results[i] = c.submit([f"k{i}"], [b"v"], 1).result(timeout=10)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    answered = 0
    while any(t.is_alive() for t in threads):
        if answered < len(bookie.calls):
            bookie.answer(answered, sqn=1 + sum(
                len(p) for calls, _ in bookie.calls[:answered] for p in calls))
            answered += 1
    assert sorted(results.values()) == list(range(1, 33))
    assert len(bookie.calls) < 32 and c.counters["parts"] == 32


def test_after_a_call_of_many_parts_the_next_waits_for_its_callers_to_come_back():
    bookie = FakeBookie()
    c = coalescer(bookie, linger_s=10.0, gap_s=10.0)  # long: only the callers end the wait
    c.submit(["a"], [b"v"], 1)
    c.submit(["b"], [b"v"], 1)
    c.submit(["c"], [b"v"], 1)
    bookie.answer(0)
    assert bookie.calls[1][0] == [["b"], ["c"]]  # a call of one part does not linger
    bookie.answer(1)
    c.submit(["d"], [b"v"], 1)
    assert len(bookie.calls) == 2  # one of two callers is back: it lingers (counted below)
    c.submit(["e"], [b"v"], 1)
    wait_for(lambda: len(bookie.calls) == 3)
    assert bookie.calls[2][0] == [["d"], ["e"]] and c.counters["lingered"] == 1
    short = coalescer(bookie, linger_s=0.01, gap_s=10.0)
    short.submit(["f"], [b"v"], 1)
    short.submit(["g"], [b"v"], 1)
    short.submit(["h"], [b"v"], 1)
    bookie.answer(2)
    bookie.answer(3)
    bookie.answer(4)  # "g" and "h"
    short.submit(["i"], [b"v"], 1)  # alone: sent once the linger times out
    wait_for(lambda: len(bookie.calls) == 6)
    assert bookie.calls[5][0] == [["i"]]


def test_a_linger_ends_once_the_callers_stop_coming():
    bookie = FakeBookie()
    c = coalescer(bookie, linger_s=10.0, gap_s=0.02)
    for k in "abc":
        c.submit([k], [b"v"], 1)
    bookie.answer(0)
    bookie.answer(1)  # "b" and "c": the next call lingers for two callers
    started = time.monotonic()
    c.submit(["d"], [b"v"], 1)  # only one comes back
    wait_for(lambda: len(bookie.calls) == 3)
    assert time.monotonic() - started < 5.0 and bookie.calls[2][0] == [["d"]]


def test_a_thread_that_finds_no_call_in_flight_waits_for_its_own_and_sends_the_next():
    """With ``wait``, the sending thread waits for its call itself (no future's callback);
    parts that come meanwhile go in the next call, which completes as usual."""
    bookie, waited = FakeBookie(), []

    def wait(call):
        waited.append(call)
        return call.result(timeout=5)

    c = Coalescer(bookie.send, max_changes=100, max_bytes=1 << 20, linger_s=0.0, gap_s=0.0,
                  wait=wait)
    sqns: list = []
    writer = threading.Thread(target=lambda: sqns.append(c.submit(["a"], [b"1"], 1).result()))
    writer.start()
    wait_for(lambda: waited)
    queued = []
    other = threading.Thread(target=lambda: queued.append(c.submit(["b"], [b"2"], 1)))
    other.start()
    other.join()  # queued behind the call in flight: its own thread does not wait for it
    assert len(bookie.calls) == 1
    bookie.answer(0, sqn=1)
    writer.join(5)
    assert sqns == [1] and waited == [bookie.calls[0][1]]
    assert bookie.calls[1][0] == [["b"]]  # sent by the first writer's thread, not waited
    bookie.answer(1, sqn=2)
    assert queued[0].result(timeout=5) == 2 and len(waited) == 1


def test_an_interrupted_wait_leaves_the_call_to_complete_as_any_other():
    bookie = FakeBookie()

    def interrupted(call):
        raise KeyboardInterrupt

    c = Coalescer(bookie.send, max_changes=100, max_bytes=1 << 20, linger_s=0.0, gap_s=0.0,
                  wait=interrupted)
    with pytest.raises(KeyboardInterrupt):
        c.submit(["a"], [b"1"], 1)
    queued = c.submit(["b"], [b"2"], 1)  # the interrupted call is still in flight
    assert len(bookie.calls) == 1
    bookie.answer(0, sqn=1)  # its outcome lands, and the next call goes
    assert bookie.calls[1][0] == [["b"]]
    bookie.answer(1, sqn=2)
    assert queued.result(timeout=5) == 2
