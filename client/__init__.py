"""The public handles: Store, Snapshot, Reader and clones (``lr.open``, ``lr.connect``, ...)."""
