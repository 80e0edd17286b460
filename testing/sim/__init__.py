"""A deterministic simulation of leveled-ray's multi-party protocols, in the spirit of
FoundationDB's simulator, TigerBeetle's VOPR and SlateDB's DST.

The real protocol code runs (Bookies in their failover shells, participants, cuts, bulk
commits, listeners, GC, a running store's splits and moves and its handles' redirects) as
plain objects in one process, on:

* :class:`~.loop.SimLoop`, an asyncio event loop on virtual time whose seeded scheduler
  picks which ready step runs next, and which skips the steps of a killed process
  (a kill -9: no ``finally`` runs);
* :class:`~.objects.SimObjects`, an in-process object store that fails requests as a
  network does (refused, answer lost after the write landed, late);
* :class:`~.world.World`, which stands in for Ray behind the product's seams (the
  ``Runtime`` of ``cluster/runtime.py``, the ``RayActor`` of ``actors/failover.py``): it
  starts each Bookie in a process of its own, names actors, carries calls between processes as
  Ray would (arguments pickled; a call to a dead process fails, one to a restarting actor
  waits), and kills and restarts processes.

Everything that could differ between two runs (time, randomness, ids, threads) comes from the
seed, so a seed replays its run exactly (:func:`~.loop.deterministic`).
"""
