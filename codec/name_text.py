"""The text form of a bucket or key, one-to-one with the names themselves.

A ``str`` name is its text; a ``bytes`` name is ``hex:`` and its bytes in hex, so ``"k"`` and
``b"k"`` stay two names wherever names travel as text: on the command line (input and output,
JSON included) and in the ``string`` name columns of Arrow batches (queries, the change feed,
Spark and Ray Data reads and writes). A ``str`` name may not begin with ``hex:`` (see
:func:`~leveled_ray.codec.checks.check_name`): the form would be ambiguous.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError

#: What begins the text form of a ``bytes`` name (and no ``str`` name).
BYTES_PREFIX = "hex:"


def name_text(name: str | bytes) -> str:
    """``name`` as text: a ``str`` as it is, ``bytes`` as ``hex:...``."""
    return BYTES_PREFIX + name.hex() if isinstance(name, bytes) else name


def name_from_text(text: str) -> str | bytes:
    """The name whose :func:`name_text` is ``text``."""
    if not text.startswith(BYTES_PREFIX):
        return text
    try:
        return bytes.fromhex(text[len(BYTES_PREFIX):])
    except ValueError:
        raise InvalidArgumentError(f"{text!r} is not the text form of a bytes name: "
                                   f"{BYTES_PREFIX} and an even number of hex digits") from None


def texts_array(names: pa.Array, is_str: np.ndarray) -> pa.Array:
    """A ``string`` array of the names' text forms: ``names`` holds each name's bytes (UTF-8
    for a ``str`` name) and ``is_str`` says which were ``str``."""
    if is_str.all():
        return names.cast(pa.string())
    as_bytes = np.flatnonzero(~is_str)
    texts = pa.array([name_text(n) for n in names.take(pa.array(as_bytes)).to_pylist()],
                     pa.string())
    if len(as_bytes) == len(names):
        return texts
    out = pc.replace_with_mask(names.cast(pa.binary()),
                               pa.array(~is_str), texts.cast(pa.binary()))
    return out.cast(pa.string())


def has_bytes_names(texts: pa.Array) -> bool:
    """Does any of these ``string`` names stand for a ``bytes`` name?"""
    return len(texts) > 0 and bool(pc.any(pc.starts_with(texts, BYTES_PREFIX)).as_py())
