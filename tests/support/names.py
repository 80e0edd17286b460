"""Names that differ only in their type (``str`` or ``bytes``), and names that are not UTF-8:
every path a key travels must keep them apart (see leveled_ray.codec.name_text)."""

import leveled_ray as lr
from leveled_ray.codec.name_text import name_text

#: ``(bucket, key, value)``: each a name of its own.
NAMED = [("b", "k", b"str key"), ("b", b"k", b"bytes key"), ("b", b"\xffraw", b"raw key"),
         (b"b", "k", b"bytes bucket"), (b"\xfeb", "k", b"raw bucket")]
#: Their text forms, as ``string`` name columns and the command line show them.
TEXT_VALUES = {(name_text(b), name_text(k)): v for b, k, v in NAMED}
TEXTS = sorted(TEXT_VALUES)


def put_named(store) -> None:
    store.put_many([lr.Put(b, k, v) for b, k, v in NAMED])


def assert_holds_named(store) -> None:
    """``store`` holds each name with its own value."""
    assert store.get_many([(b, k) for b, k, _ in NAMED]) == [v for _, _, v in NAMED]


def by_name(changes) -> dict:
    """Python changes (or objects) as ``{(bucket, key): value}``."""
    return {(c.bucket, c.key): c.value for c in changes}


def text_names(table) -> list:
    """The ``(bucket, key)`` pairs of an Arrow table with ``string`` name columns, sorted."""
    return sorted(zip(table.column("bucket").to_pylist(), table.column("key").to_pylist()))
