"""Joining or starting Ray for the client: the token, the address and the Ray Client path.
"""
from __future__ import annotations

import builtins
import os
import time

from ..actors.remote import NAMESPACE
from ..errors import InvalidArgumentError

#: Connections a Ray Client (``ray://``) driver tries when the server aborts one at start.
CLIENT_INIT_ATTEMPTS = 3


def ray_token() -> str | None:
    """This machine's Ray token (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``), if it has one."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    try:
        with builtins.open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def join_with_token() -> None:
    """Join clusters with this machine's token (unless ``RAY_AUTH_MODE`` says otherwise).
    Ray reads ``RAY_AUTH_MODE`` when it is imported, and turns token auth on by itself only
    for a cluster it finds on its own (address ``auto``), so a driver that joins by address
    asks for it here (setting the variable alone is too late once ``ray`` is imported)."""
    from ray._private.authentication.authentication_token_setup import (
        maybe_enable_token_auth_if_token_available,
    )

    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def ensure_ray(address: str | None = None, *, join: bool = False) -> None:
    """Start, or join (at ``address``, else ``RAY_ADDRESS``), a Ray cluster in namespace
    ``leveled``. Joining uses token authentication when this machine has a Ray token; a
    Ray Client address (``ray://host:port``) needs one (or ``RAY_AUTH_MODE`` set), else
    :class:`InvalidArgumentError` says what to set, instead of a connection timeout.

    With ``join``, a running cluster is joined and none is ever started: without an address
    the one running on this machine is found (``address="auto"``), and if there is none,
    :class:`InvalidArgumentError` says how to name it."""
    address = address or os.environ.get("RAY_ADDRESS") or ("auto" if join else None)
    if address and "RAY_AUTH_MODE" not in os.environ:
        if ray_token() is not None:
            join_with_token()
        elif address.startswith("ray://"):
            raise InvalidArgumentError(
                f"a Ray Client connection to {address} needs the cluster's token: set "
                "RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to it, or copy it to "
                "~/.ray/auth_token (RAY_AUTH_MODE=disabled for a cluster without auth)")
    import ray

    if ray.is_initialized():
        return
    try:
        for attempt in range(CLIENT_INIT_ATTEMPTS):
            try:
                ray.init(namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
                         configure_logging=True, logging_level="WARNING", address=address)
                break
            except ConnectionAbortedError:
                # A Ray Client server starts a server process per client; under load that
                # process can die at start, and the server aborts the connection. Try again.
                if attempt == CLIENT_INIT_ATTEMPTS - 1:
                    raise
                ray.shutdown()
                time.sleep(1.0)
    except ConnectionError as exc:
        if not join:
            raise
        raise InvalidArgumentError(
            f"cannot reach the Ray cluster that runs the store ({exc}). Name it: pass the "
            "option ray_address (the driver's ray.get_runtime_context().gcs_address), call "
            "leveled_ray.spark.register(spark) in the driver after Ray started, or use the "
            "options of RayOnSpark.write_options()") from None
