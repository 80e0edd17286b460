"""The checkpoint lease that readers and bulk reads share, on a file:// store without Ray."""

import asyncio

import pytest

import leveled_ray as lr
from leveled_ray.admin.checkpoint_lease import CheckpointLease
from leveled_ray.admin.checkpoints import create_checkpoint, delete_checkpoint, list_checkpoints
from leveled_ray.clock import ManualClock
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest import Manifest, ManifestStore
from leveled_ray.testing.faults import Fault, FaultInjectingStore

LIFETIME = 60.0


def expiry(manifests, checkpoint_id):
    found = asyncio.run(list_checkpoints(manifests))
    return next(c.expires_at for c in found if c.id == checkpoint_id)


def test_a_lease_renews_when_due_rides_out_failures_and_reports_a_gone_checkpoint(tmp_path):
    url = f"file://{tmp_path}/db"
    manifests = ManifestStore(ObjectStore.from_url(url))
    asyncio.run(manifests.create_initial(Manifest.new()))
    clock = ManualClock()
    pin = asyncio.run(create_checkpoint(manifests, LIFETIME, clock=clock))
    first = expiry(manifests, pin.id)

    fresh = CheckpointLease(manifests, pin.id, LIFETIME, clock)
    asyncio.run(fresh.keep())  # just made: nothing is due, nothing is written
    assert not fresh.due and expiry(manifests, pin.id) == first

    clock.advance(30)
    due = CheckpointLease(manifests, pin.id, LIFETIME, clock, renewed_at=-LIFETIME)
    asyncio.run(due.keep())
    assert not due.due and expiry(manifests, pin.id) >= first + 30

    # Every manifest read fails: the renewal is counted and retried later; the read goes on.
    faulty = ManifestStore(FaultInjectingStore.wrap(
        url, Fault("list", "manifest/",
                   count=100), options=lr.Options(object_store=dict(max_retries=0))))
    failing = CheckpointLease(faulty, pin.id, LIFETIME, clock, renewed_at=-LIFETIME)
    asyncio.run(failing.keep())
    assert failing.failures == 1 and not failing.due

    asyncio.run(delete_checkpoint(manifests, pin.id))
    gone = CheckpointLease(manifests, pin.id, LIFETIME, clock, renewed_at=-LIFETIME)
    with pytest.raises(lr.CheckpointNotFoundError):
        asyncio.run(gone.keep())
