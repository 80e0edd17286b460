"""Tools for testing leveled-ray, never imported by the product (an import contract in
``setup.cfg`` keeps it so): the deterministic simulation of the protocols (:mod:`.sim`)."""
