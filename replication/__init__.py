"""Replication: a second store kept in sync with a running one (``lr.replicate``)."""

from .actor import ReplicatorHandle, replicate

__all__ = ["ReplicatorHandle", "replicate"]
