"""Tools for testing leveled-ray, never imported by the product (an import contract in
``setup.cfg`` keeps it so): the deterministic simulation of the protocols (:mod:`.sim`), an
object store that fails chosen requests in process (:mod:`.faults`), and an HTTP proxy that
injects faults between a client and an S3 server (:mod:`.fault_proxy`)."""
