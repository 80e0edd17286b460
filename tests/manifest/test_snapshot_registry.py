"""The snapshot registry and leveled's delete rule (pure functions, no Ray)."""

import pytest

import leveled_ray as lr
from leveled_ray.manifest import snapshot_registry as sn


def test_no_snapshots_means_delete():
    ok, live = sn.ready_to_delete({}, removed_in=5, now=0.0)
    assert ok and live == {}


def test_older_snapshot_blocks_newer_ones_do_not():
    reg = sn.register({}, "old", manifest_id=4, timeout_s=10, now=0.0)
    reg = sn.register(reg, "new", manifest_id=5, timeout_s=10, now=0.0)
    assert sn.ready_to_delete(reg, removed_in=5, now=1.0)[0] is False  # "old" reads v4
    assert sn.ready_to_delete(reg, removed_in=4, now=1.0)[0] is True
    reg = sn.release(reg, "old")
    assert sn.ready_to_delete(reg, removed_in=5, now=1.0)[0] is True
    assert sn.ready_to_delete(reg, removed_in=6, now=1.0)[0] is False  # "new" reads v5


def test_expired_snapshots_are_dropped_on_each_check():
    reg = sn.register({}, "dead-holder", manifest_id=1, timeout_s=30, now=100.0)
    ok, live = sn.ready_to_delete(reg, removed_in=2, now=129.0)
    assert not ok and "dead-holder" in live
    ok, live = sn.ready_to_delete(live, removed_in=2, now=130.0)
    assert ok and live == {}


def test_renewing_moves_the_timeout_and_release_is_idempotent():
    reg = sn.register({}, "s", 1, 10, now=0.0)
    reg = sn.register(reg, "s", 1, 10, now=8.0)
    assert sn.ready_to_delete(reg, 2, now=15.0)[0] is False
    assert sn.release(sn.release(reg, "s"), "s") == {}
    with pytest.raises(lr.InvalidArgumentError):
        sn.register({}, "s", 1, 0, now=0.0)


def test_registry_shell_uses_its_clock():
    now = [0.0]
    reg = sn.SnapshotRegistry(clock=lambda: now[0])
    reg.register("a", 3, timeout_s=5)
    reg.register("b", 7, timeout_s=50)
    assert reg.oldest() == 3 and not reg.ready_to_delete(4)
    now[0] = 6.0  # "a" times out
    assert reg.ready_to_delete(4) and len(reg) == 1 and reg.oldest() == 7
    reg.release("b")
    assert reg.oldest() is None and reg.ready_to_delete(100)
