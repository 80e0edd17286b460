"""Retries and create resolution: the pure rules with fake I/O and a fake clock, then through
the in-process fault store (which wraps single requests of a real local store), without Ray."""

import asyncio
import gc
import random

import pytest
from obstore.exceptions import GenericError

import leveled_ray as lr
from leveled_ray.files.failures import classify
from leveled_ray.files.outcomes import (
    AttemptError,
    Created,
    Failure,
    RetryPolicy,
    Unsettled,
    hedged,
    retry,
    settle_create,
)
from leveled_ray.files.sst import SstInfo
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest import Manifest, ManifestStore
from leveled_ray.manifest import transitions as tr
from leveled_ray.testing.faults import Fault, FaultInjectingStore


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    async def sleep(self, seconds):
        self.now += seconds


class FakeTarget:
    """One name in a store: ``answers`` script what each send does."""

    def __init__(self, answers, existing=None, read_fails=0):
        self.answers = list(answers)
        self.object = existing
        self.sends = 0
        self.read_fails = read_fails

    async def send(self):
        self.sends += 1
        answer = self.answers.pop(0) if self.answers else "ok"
        if answer in ("ok", "lost") and self.object is None:
            self.object = b"mine"
        elif answer in ("ok", "lost"):
            raise AttemptError(Failure.EXISTS)
        if answer == "lost":
            raise AttemptError(Failure.UNKNOWN)
        if answer != "ok":
            raise AttemptError(Failure(answer))

    async def read_back(self):
        if self.read_fails:
            self.read_fails -= 1
            raise AttemptError(Failure.UNKNOWN)
        return self.object


POLICY = RetryPolicy(max_retries=10, timeout_s=30.0, backoff_s=0.05, max_backoff_s=2.0)


def settle(target, budget=10.0, policy=POLICY):
    clock = FakeClock()
    return asyncio.run(settle_create(target.send, target.read_back, b"mine", policy, budget,
                                     clock=clock, sleep=clock.sleep)), clock


def test_a_create_that_lands_costs_one_request():
    target = FakeTarget(["ok"])
    assert settle(target)[0] == (Created.MINE, None)
    assert target.sends == 1


def test_a_lost_reply_is_resolved_by_reading_the_object_back():
    target = FakeTarget(["lost"])
    assert settle(target)[0] == (Created.MINE, None)
    assert target.sends == 1  # the read showed it landed: nothing was sent again


def test_exists_after_our_own_retry_is_our_success():
    # The first attempt landed but its reply was lost and the read failed; the resend finds
    # the name taken, and the read-back shows the object is ours: never a lost race.
    target = FakeTarget(["lost"], read_fails=1)
    assert settle(target)[0] == (Created.MINE, None)
    assert target.sends == 2


def test_another_writers_object_is_theirs():
    target = FakeTarget(["ok"], existing=b"theirs")
    assert settle(target)[0] == (Created.THEIRS, b"theirs")


def test_a_request_that_did_not_land_is_resent():
    target = FakeTarget(["unknown", "unknown"])  # timed out before reaching the store
    assert settle(target)[0] == (Created.MINE, None)
    assert target.sends == 3


def test_an_outcome_that_stays_unknown_is_reported_as_such_within_the_budget():
    target = FakeTarget(["lost"] + ["unknown"] * 100, read_fails=100)
    with pytest.raises(Unsettled) as err:
        settle(target, budget=3.0)
    assert err.value.maybe_applied


def test_the_budget_bounds_time_and_resends():
    for policy, budget in ((POLICY, 3.0), (RetryPolicy(max_retries=2), 1000.0)):
        target = FakeTarget(["unknown"] * 100, read_fails=100)
        clock = FakeClock()
        with pytest.raises(Unsettled):
            asyncio.run(settle_create(target.send, target.read_back, b"mine", policy, budget,
                                      clock=clock, sleep=clock.sleep))
        assert clock.now <= budget
        assert target.sends <= policy.max_retries + 1


def test_requests_that_never_left_surely_did_not_happen():
    target = FakeTarget(["not sent"] * 100)
    with pytest.raises(Unsettled) as err:
        settle(target, budget=2.0)
    assert not err.value.maybe_applied
    assert target.object is None


def test_a_refusal_is_not_retried():
    target = FakeTarget(["denied"])
    with pytest.raises(Unsettled):
        settle(target)
    assert target.sends == 1


def test_retry_is_bounded_by_count_and_time():
    clock = FakeClock()
    calls = []

    async def failing():
        calls.append(clock.now)
        raise AttemptError(Failure.UNKNOWN)

    with pytest.raises(AttemptError):
        asyncio.run(retry(failing, RetryPolicy(max_retries=3, timeout_s=100),
                          clock=clock, sleep=clock.sleep))
    assert len(calls) == 4
    calls.clear()
    with pytest.raises(AttemptError):
        asyncio.run(retry(failing, RetryPolicy(max_retries=1000, timeout_s=5.0),
                          clock=clock, sleep=clock.sleep))
    assert calls[-1] - calls[0] <= 5.0

    async def missing():
        calls.append(0)
        raise AttemptError(Failure.MISSING)

    calls.clear()
    with pytest.raises(AttemptError):
        asyncio.run(retry(missing, POLICY, clock=clock, sleep=clock.sleep))
    assert calls == [0]  # an answer, not a failure: no retry


def test_backoff_is_jittered_and_capped():
    delays = RetryPolicy(backoff_s=0.1, max_backoff_s=1.0).delays(random.Random(1))
    drawn = [next(delays) for _ in range(50)]
    assert all(0.0 <= d <= 1.0 for d in drawn)
    assert drawn[0] <= 0.1 and max(drawn[10:]) > 0.5  # ramps up to the cap
    assert len(set(drawn)) == len(drawn)  # jittered, not a fixed ladder


def test_client_errors_are_classified():
    connect = GenericError("Error performing PUT x - HTTP error: error sending request\n"
                           "HttpError {\n kind: Connect,\n source: ...")
    timeout = GenericError("Error performing PUT x - HttpError {\n kind: Timeout,\n")
    five = GenericError("Server returned non-2xx status code: 503 Service Unavailable")
    bad = GenericError("Server returned non-2xx status code: 400 Bad Request")
    throttled = GenericError("Server returned non-2xx status code: 429 Too Many Requests")
    assert classify(connect) is Failure.NOT_SENT
    assert classify(timeout) is Failure.UNKNOWN and classify(five) is Failure.UNKNOWN
    assert classify(throttled) is Failure.UNKNOWN
    assert classify(bad) is Failure.REJECTED
    assert classify(five, atomic=True) is Failure.NOT_SENT  # a local write is all or nothing
    assert classify(FileExistsError()) is Failure.EXISTS
    assert classify(FileNotFoundError()) is Failure.MISSING
    assert classify(PermissionError()) is Failure.DENIED


# --- through the in-process fault store -----------------------------------------------------


FAST = lr.Options(object_store=dict(retry_backoff_s=0.001, retry_max_backoff_s=0.01,
                                    write_resolve_s=5.0, max_retries=3))


def faulty(tmp_path, *faults, options=FAST):
    return FaultInjectingStore.wrap(f"file://{tmp_path}/db", *faults, options=options)


def test_reads_retry_transient_failures_then_raise_a_typed_error(tmp_path):
    plain = ObjectStore.from_url(f"file://{tmp_path}/db")
    plain.put_if_absent("a", b"x")
    store = faulty(tmp_path, Fault("get", count=2, reply="timeout"))
    assert store.get("a") == b"x"
    assert store.stats.retries == 2
    store = faulty(tmp_path, Fault("get", count=100, reply="timeout"))
    with pytest.raises(lr.ObjectStoreError) as err:
        store.get("a")
    assert err.value.definite  # a read changes nothing
    assert store.seen[0] == FAST.object_store.max_retries + 1  # bounded


def test_put_if_absent_knows_its_own_create_after_an_exists_answer(tmp_path):
    store = faulty(tmp_path, Fault("put_if_absent", applied=True, reply="exists"))
    assert store.put_if_absent("a", b"mine") is True
    assert store.stats.resolved == 1
    assert store.put_if_absent("a", b"other") is False  # someone else's: no change
    assert store.get("a") == b"mine"


def test_put_if_absent_after_a_lost_reply(tmp_path):
    store = faulty(tmp_path, Fault("put_if_absent", applied=True))
    assert store.put_if_absent("a", b"mine", ident=2) is True
    store = faulty(tmp_path, Fault("put_if_absent", applied=True))
    assert store.put_if_absent("a", b"mi-other", ident=2) is True  # same identity bytes
    assert store.put_if_absent("a", b"xx-other", ident=2) is False


def test_put_if_absent_that_never_reached_the_store_is_definite(tmp_path):
    store = faulty(tmp_path, Fault("put_if_absent", count=100))
    with pytest.raises(lr.ObjectStoreError) as err:
        store.put_if_absent("a", b"mine")
    assert err.value.definite
    assert store.head("a") is None


def test_create_or_seal_seals_a_name_whose_outcome_stays_unknown(tmp_path):
    # Every data attempt times out without landing (and max_retries=3 bounds them); the seal
    # then takes the name, so the data can never land later.
    store = faulty(tmp_path, Fault("put_if_absent", count=FAST.object_store.max_retries + 1,
                                   reply="timeout"))
    assert store.create_or_seal("slot", b"DATA-1", lambda: b"SEAL-1", ident=4) is Created.SEALED
    assert store.get("slot") == b"SEAL-1"
    assert store.stats.sealed == 1
    late = ObjectStore.from_url(f"file://{tmp_path}/db")
    assert late.put_if_absent("slot", b"DATA-1", ident=4) is False  # a late resend loses


def test_create_or_seal_finds_data_that_landed(tmp_path):
    # The data landed on its first attempt; every reply and every read-back was lost.
    store = faulty(tmp_path, Fault("put_if_absent", applied=True),
                   Fault("put_if_absent", after=1, count=FAST.object_store.max_retries,
                         reply="timeout"),
                   Fault("get_range", count=FAST.object_store.max_retries + 1, reply="timeout"))
    assert store.create_or_seal("slot", b"DATA-1", lambda: b"SEAL-1", ident=4) is Created.MINE
    assert store.get("slot") == b"DATA-1"


def test_create_or_seal_stays_indefinite_only_while_nothing_answers(tmp_path):
    store = faulty(tmp_path, Fault("put_if_absent", count=100, reply="timeout"),
                   Fault("get_range", count=100, reply="timeout"))
    with pytest.raises(lr.ObjectStoreError) as err:
        store.create_or_seal("slot", b"DATA-1", lambda: b"SEAL-1", ident=4)
    assert not err.value.definite


def _sst(name):
    return SstInfo(f"ledger/{name}.sst", 10, 1, 0, b"a", b"b", 1, 1)


def test_a_manifest_transition_is_never_applied_twice(tmp_path):
    """Regression: a create whose first attempt landed was answered "already exists" (the
    client's retry saw its own object), the CAS loop took it for a lost race and applied the
    transition again on top of it, listing the SST twice."""
    url = f"file://{tmp_path}/db"
    asyncio.run(ManifestStore(ObjectStore.from_url(url)).create_initial(
        Manifest.new().with_changes(writer_epoch=1)))
    store = FaultInjectingStore.wrap(url, Fault("put_if_absent", "manifest/", applied=True,
                                                reply="exists"), options=FAST)
    manifests = ManifestStore(store)
    mid, m = asyncio.run(manifests.update(lambda m: tr.add_l0(m, 1, _sst("a"), 5)))
    assert [f.name for f in m.levels[0]] == ["ledger/a.sst"]
    assert asyncio.run(manifests.all_ids()) == [0, 1]  # one version written, not two
    assert asyncio.run(manifests.read(1)).levels[0] == (_sst("a"),)


def test_manifest_updates_stay_exact_under_random_faults(tmp_path):
    """Many updates through a store failing at random in every way: each change is applied
    once, in the version its update returned, and no version lists a file twice."""
    url = f"file://{tmp_path}/db"
    asyncio.run(ManifestStore(ObjectStore.from_url(url)).create_initial(
        Manifest.new().with_changes(writer_epoch=1)))
    rng = random.Random(7)
    faults = []
    for n in range(0, 120, 3):
        kind = rng.choice([dict(applied=True), dict(applied=True, reply="exists"),
                           dict(reply="timeout"), dict()])
        faults.append(Fault("put_if_absent", "manifest/", after=n, **kind))
    faults.append(Fault("get_range", "manifest/", after=1, count=1, reply="timeout"))
    store = FaultInjectingStore.wrap(url, *faults, options=FAST)
    manifests = ManifestStore(store)

    async def run():
        current = await manifests.latest()
        for i in range(40):
            current = await manifests.update(lambda m, i=i: tr.add_l0(m, 1, _sst(f"s{i}"), i),
                                             current)
            assert any(f.name == f"ledger/s{i}.sst" for f in current[1].levels[0])
        return current

    mid, final = asyncio.run(run())
    names = [f.name for f in final.levels[0]]
    assert sorted(names) == sorted(f"ledger/s{i}.sst" for i in range(40))
    assert store.stats.resolved > 0
    latest = asyncio.run(ManifestStore(ObjectStore.from_url(url)).latest())
    assert latest[1] == final  # what the loop returned is what the store holds


def test_a_slow_request_is_hedged_and_the_losing_copy_leaves_no_error_behind():
    """The copy sent beside a slow request answers; the slow one, cancelled, fails as it
    stops (a client that turns its cancellation into an error): that error is no one's, and
    asyncio must not report it as an exception never retrieved."""
    unretrieved: list = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: unretrieved.append(context["message"]))
        sends = []

        async def send():
            sends.append(None)
            if len(sends) == 2:
                return "second"
            try:
                await asyncio.Event().wait()  # a copy that never answers
            except asyncio.CancelledError:
                raise AttemptError(Failure.UNKNOWN, TimeoutError("slow copy")) from None

        answer = await hedged(send, 0.01)
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
        return answer, len(sends)

    assert asyncio.run(main()) == (("second", True), 2)
    assert unretrieved == []
