"""``lr.clone(parent_url, url)``: create a clone (see :mod:`leveled_ray.admin.clone`) and open it.
"""
from __future__ import annotations

from ..admin.clone import create_clone
from ..files.sync import run_sync
from ..options import Options
from .store import open as open_store


def clone(parent_url: str, url: str, checkpoint: str | None = None, *,
          options: Options | None = None, parent_options: Options | None = None,
          name: str | None = None):
    """Create the clone at ``url`` of the store at ``parent_url`` (as of the checkpoint
    ``checkpoint``, or of now) and open it for writing; returns its :class:`~leveled_ray.Store`.
    Safe to retry: an interrupted clone is finished, a finished one is just opened."""
    run_sync(create_clone(parent_url, url, checkpoint, options, parent_options))
    return open_store(url, options, name=name)
