"""Ray Data for leveled-ray stores (``lr.data``): :func:`read` a store (or a checkpoint of it)
as a ``ray.data.Dataset``, :func:`read_changes` for a bounded change feed, and :func:`sink`
to write a Dataset through the bulk path, committed atomically. Tested with Ray 2.60 (the
``Datasource`` / ``Datasink`` interfaces changed in 2.40: everything is passed by keyword)."""

from .store_data import StoreDatasink, StoreDatasource, read, read_changes, sink

__all__ = ["StoreDatasink", "StoreDatasource", "read", "read_changes", "sink"]
