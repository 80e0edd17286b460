"""What a failed object-store request means: a :class:`~.outcomes.Failure`, read from the
exception obstore (or the memory actor) raised."""

from __future__ import annotations

import re

from obstore.exceptions import (
    AlreadyExistsError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.exceptions import (
    BaseError as ObstoreError,
)

from .outcomes import Failure

_STATUS = re.compile(r"status code: (\d{3})")
#: Client errors that a later attempt can still get past (timeout, conflict, throttling).
_RETRIABLE_4XX = {408, 409, 429}


def classify(exc: BaseException, *, atomic: bool = False) -> Failure:
    """What a failed request means. ``atomic`` backends (a local directory, memory) apply a
    write whole or not at all before they answer, so their failures are never in doubt."""
    if is_short_read(exc):
        return Failure.SHORT
    if isinstance(exc, (NotFoundError, FileNotFoundError)):
        return Failure.MISSING
    if isinstance(exc, (AlreadyExistsError, PreconditionError, FileExistsError)):
        return Failure.EXISTS
    if isinstance(exc, (PermissionDeniedError, UnauthenticatedError, PermissionError)):
        return Failure.DENIED
    if isinstance(exc, ConnectionRefusedError):
        return Failure.NOT_SENT
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return Failure.UNKNOWN
    if isinstance(exc, RuntimeError) and not isinstance(exc, ObstoreError):
        return Failure.REJECTED  # the memory store's own refusal
    text = str(exc)
    if "kind: Connect," in text or "tcp connect error" in text:
        return Failure.NOT_SENT  # no connection: not a byte of the request was sent
    found = _STATUS.search(text)
    status = int(found.group(1)) if found else 0
    if 400 <= status < 500 and status not in _RETRIABLE_4XX:
        return Failure.REJECTED
    return Failure.NOT_SENT if atomic else Failure.UNKNOWN


class ShortRead(Exception):
    """obstore's ``get_ranges`` panicked: it does so when a range starts past the end of
    the bytes it got (a Rust panic, a ``BaseException`` here, or an "unknown error")."""


async def ranges_or_short(read):
    try:
        return await read()
    except BaseException as exc:
        if type(exc).__name__ == "PanicException" or "panicked" in str(exc):
            raise ShortRead(str(exc).split("\n", 1)[0]) from None
        raise


def is_short_read(exc: BaseException) -> bool:
    """A ranged read past the object's end: obstore's invalid range (HTTP 416 on S3), or
    :class:`ShortRead`."""
    if isinstance(exc, ShortRead):
        return True
    text = str(exc)
    return ("Requested range was invalid" in text or "Invalid range" in text
            or "InvalidRange" in text
            or "status code: 416" in text)



def first_line(cause: BaseException | None) -> str:
    """The first line of a client error (obstore appends a long debug dump)."""
    return str(cause).split("\n", 1)[0] if cause is not None else "no answer"
