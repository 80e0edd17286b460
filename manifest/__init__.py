"""The manifest: what the store is made of, versioned with put-if-absent."""

from .model import Checkpoint, CloneParent, Manifest, decode, encode
from .store import ManifestStore, cas_update

__all__ = ["Checkpoint", "CloneParent", "Manifest", "ManifestStore", "cas_update", "decode",
           "encode"]
