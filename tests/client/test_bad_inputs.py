"""Bad inputs get clear, typed errors, and the store is unchanged."""

import functools
import itertools

import pytest

import leveled_ray as lr

pytestmark = pytest.mark.ray

BAD_CALLS = [
    ("empty bucket", lambda s: s.put("", "k", b"v"), "bucket must not be empty"),
    ("empty key", lambda s: s.put("b", b"", b"v"), "key must not be empty"),
    ("int key", lambda s: s.put("b", 7, b"v"), "key must be str or bytes"),
    ("str value", lambda s: s.put("b", "k", "text"), "value must be bytes"),
    ("None value", lambda s: s.put("b", "k", None), "value must be bytes"),
    ("value too big", lambda s: s.put("b", "k", b"x" * 2049), "max_value_bytes"),
    ("bad index op", lambda s: s.put("b", "k", b"v", indexes=[("set", "a_bin", "x")]),
     "'add' or 'remove'"),
    ("bad index term", lambda s: s.put("b", "k", b"v", indexes=[("add", "n_int", "x")]),
     "int terms"),
    ("negative ttl", lambda s: s.put("b", "k", b"v", ttl=-1), "ttl must be positive"),
    ("both conditions", lambda s: s.put("b", "k", b"v", if_sqn=1, if_absent=True), "not both"),
    ("put_many item", lambda s: s.put_many([lr.Put("b", "k", b"v"), ("b", "k2", b"v")]),
     "Put or Delete"),
    ("put_many not a list", lambda s: s.put_many(lr.Put("b", "k", b"v")), "list of"),
    ("put_many one bad", lambda s: s.put_many([lr.Put("b", "ok", b"v"), lr.Put("b", "", b"v")]),
     "key must not be empty"),
    ("put_many too big", lambda s: s.put_many([lr.Put("b", f"k{i}", b"x" * 2000)
                                               for i in range(40)]), "journal.max_file_bytes"),
    ("get bad key", lambda s: s.get("b", None), "key must be str or bytes"),
    ("get_many pair", lambda s: s.get_many([("b", "k", "x")]), "pair"),
    ("get_many str", lambda s: s.get_many("bk"), "pairs"),
    ("metadata", lambda s: s.put("b", "k", b"v", metadata={"x": {1, 2}}), "JSON"),
    ("surrogate bucket", lambda s: s.put("\ud800", "k", b"v"), "not valid unicode"),
    ("surrogate key", lambda s: s.put("b", "k\udfff", b"v"), "not valid unicode"),
    ("surrogate term", lambda s: s.put("b", "k", b"v", indexes=[("add", "a_bin", "\ud800")]),
     "not valid unicode"),
    ("surrogate field", lambda s: s.put("b", "k", b"v", indexes=[("add", "\ud800_bin", "x")]),
     "not valid unicode"),
    ("surrogate get", lambda s: s.get("b", "\ud800"), "not valid unicode"),
    ("surrogate query", lambda s: s.index_query("b", "a_bin", "\ud800", "z"),
     "not valid unicode"),
]


@pytest.fixture(scope="module")
def small_store(ray_cluster, tmp_path_factory):
    url = f"file://{tmp_path_factory.mktemp('bad')}/db"
    store = lr.open(url, lr.Options(max_value_bytes=2048, journal=dict(max_file_bytes=64 * 1024)))
    store.put("b", "k", b"original")
    yield store
    store.close()


#: Each call that takes seconds, with the number put in its place.
SECONDS_CALLS = [
    ("listen lifetime", lambda s, n: s.listen(0, lifetime=n)),
    ("lease lifetime", lambda s, n: s.set_history_lease("h", 0, n)),
    ("checkpoint lifetime", lambda s, n: s.checkpoint(lifetime=n)),
    ("snapshot timeout", lambda s, n: s.snapshot(timeout_s=n)),
    ("snapshot at_time", lambda s, n: s.snapshot(at_time=n)),
    ("ttl", lambda s, n: s.put("b", "k", b"v", ttl=n)),
    ("expires_at", lambda s, n: s.put_many([lr.Put("b", "k", b"v", expires_at=n)])),
]
for _name, _call in list(SECONDS_CALLS):
    BAD_CALLS += [(f"{_name} {n}", functools.partial(lambda c, n, s: c(s, n), _call, n),
                   "must be")
                  for n in (float("nan"), float("inf"), -1.0)]


@pytest.mark.parametrize("name,call,message", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_is_rejected_and_changes_nothing(small_store, name, call, message):
    before = small_store.stats()
    with pytest.raises(lr.InvalidArgumentError, match=message):
        call(small_store)
    after = small_store.stats()
    assert after["next_sqn"] == before["next_sqn"]
    assert after["changes"] == before["changes"]
    assert small_store.get("b", "k") == b"original"
    assert small_store.get("b", "ok") is None and small_store.get("b", "k2") is None
    assert small_store.list_history_leases() == [] and small_store.list_checkpoints() == []


def test_bad_urls_and_options(ray_cluster, tmp_path):
    for url in ("ftp://x/y", "file://relative/path", "s3:///no-bucket", "memory://", 5,
                "s3://", "s3://bucket//prefix", "s3://bucket/a//b", "s3://Bad_Bucket/p",
                "s3://bucket/p?x=1", f"file://{tmp_path}/a\0b", "memory://a\0b"):
        with pytest.raises(lr.InvalidArgumentError):
            lr.open(url)
    assert not any(tmp_path.iterdir())  # a refused URL creates nothing
    with pytest.raises(lr.InvalidArgumentError, match="lr.Options"):
        lr.open("memory://x", options={"compression": "lz4"})
    with pytest.raises(lr.InvalidArgumentError, match="detached store needs a name"):
        lr.open("memory://x", detached=True)


def test_closed_store_raises_store_closed(ray_cluster, tmp_url):
    store = lr.open(tmp_url)
    store.close()
    store.close()  # closing twice is harmless
    with pytest.raises(lr.StoreClosedError):
        store.put("b", "k", b"v")
    with pytest.raises(lr.StoreClosedError):
        store.get("b", "k")


def nested(name: str, value) -> dict:
    """``Options`` keywords that set the setting named ``name`` as text (``gc.min_age_s``)."""
    group, _, leaf = name.rpartition(".")
    return {group: {leaf: value}} if group else {name: value}


@pytest.mark.parametrize("field", ["journal.flush_ms", "ledger.push_ms", "metrics_interval_s",
                                   "object_store.request_timeout_s", "gc.min_age_s",
                                   "object_store.write_resolve_s", "gc.snapshot_timeout_s"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, "1", None, True])
def test_every_number_option_refuses_non_finite_and_wrong_values(field, value):
    with pytest.raises(lr.InvalidArgumentError, match=field):
        lr.Options(**nested(field, value))
    with pytest.raises(lr.InvalidArgumentError, match=field):
        lr.Options().replace(**nested(field, value))


def test_every_option_field_is_validated():
    names = lr.Options.text_names()
    assert {"compression", "gc.min_age_s", "journal.max_file_bytes", "ledger.l0_max_keys",
            "object_store.s3_endpoint"} <= set(names)
    for name in names:
        with pytest.raises(lr.InvalidArgumentError, match=name):
            lr.Options(**nested(name, object()))


def test_a_group_is_its_dataclass_or_a_dict_of_its_fields():
    from leveled_ray.options import GcOptions

    given = lr.Options(gc=GcOptions(min_age_s=5), ledger={"push_keys": 7})
    assert given.gc.min_age_s == 5 and given.ledger.push_keys == 7
    changed = given.replace(gc={"interval_s": 0})
    assert (changed.gc.interval_s, changed.gc.min_age_s, changed.ledger.push_keys) == (0, 5, 7)
    assert lr.Options.from_text({"gc.min_age_s": "9", "compression": "zstd"}, changed) == \
        changed.replace(compression="zstd", gc={"min_age_s": 9.0})
    for bad in ({"gc": 5}, {"gc": {"min_age": 1}}, {"ledger": GcOptions()}):
        with pytest.raises(lr.InvalidArgumentError, match="gc|ledger"):
            lr.Options(**bad)
    with pytest.raises(lr.InvalidArgumentError, match="unknown option 'gc_min_age_s'"):
        lr.Options.from_text({"gc_min_age_s": "1"})


@pytest.mark.parametrize("min_age", [-1, "x", float("nan"), float("inf")])
def test_gc_refuses_a_bad_min_age_and_deletes_nothing(tmp_path, min_age):
    from leveled_ray.bulk import write as bulk_write
    from leveled_ray.files.store import ObjectStore

    url = f"file://{tmp_path}/db"
    bulk_write.begin(url)  # creates the store's first manifest, offline
    (tmp_path / "db" / "ledger").mkdir()
    (tmp_path / "db" / "ledger" / "orphan.sst").write_bytes(b"x")
    store = ObjectStore.from_url(url)
    before = {m.path for prefix in ("ledger/", "manifest/") for m in store.list(prefix)}
    with pytest.raises(lr.InvalidArgumentError, match="min_age"):
        lr.gc(url, min_age=min_age)
    assert {m.path for prefix in ("ledger/", "manifest/") for m in store.list(prefix)} == before


def test_small_journal_files_needs_two_files_to_merge():
    with pytest.raises(lr.InvalidArgumentError, match="journal.small_files"):
        lr.Options(journal=dict(small_files=1))
    assert lr.Options(journal=dict(small_files=2)).journal.small_files == 2


def test_a_url_naming_a_regular_file_is_bad_input(ray_cluster, tmp_path):
    """A file where a store's directory should be: ``InvalidArgumentError`` from every entry
    point, and the command line's exit status 2 with the message, not a traceback."""
    import subprocess
    import sys

    path = tmp_path / "a-file"
    path.write_bytes(b"not a store")
    url = f"file://{path}"
    for call in (lambda: lr.open(url), lambda: lr.admin(url), lambda: lr.reader(url),
                 lambda: lr.compare(url, url), lambda: lr.gc(url)):
        with pytest.raises(lr.InvalidArgumentError, match="not a directory"):
            call()
    for verb in (["stats", "--url", url], ["compare", "--url", url, url],
                 ["export", "--url", url, "--to", str(tmp_path / "out")]):
        done = subprocess.run([sys.executable, "-m", "leveled_ray.cli.main", *verb],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (verb, done.stderr[-500:])
        assert "not a directory" in done.stderr and "Traceback" not in done.stderr, verb
    assert path.read_bytes() == b"not a store"


def test_calls_refused_for_a_missing_store_make_no_directory(ray_cluster, tmp_path):
    """``InvalidArgumentError`` means nothing changed: a call refused because no store is at
    its URL leaves the file system as it was."""
    missing = f"file://{tmp_path}/missing"
    with lr.open(f"file://{tmp_path}/a") as a:
        before = sorted(tmp_path.iterdir())
        for call in (lambda: lr.compare(a, missing), lambda: lr.compare(missing, a.url),
                     lambda: lr.reader(missing), lambda: lr.admin(missing).list_checkpoints(),
                     lambda: lr.gc(missing)):
            with pytest.raises(lr.InvalidArgumentError, match="no store at"):
                call()
        assert sorted(tmp_path.iterdir()) == before


def _tree(root) -> list:
    return sorted((str(p.relative_to(root)), p.is_dir()) for p in root.rglob("*"))


@pytest.mark.parametrize("layout", ["plain", "sharded"])
def test_every_entry_point_refuses_every_bad_url_and_changes_nothing(ray_cluster, tmp_path,
                                                                     layout):
    """Each public entry point that takes a store's URL, given a missing store, a file in
    its place, a bad scheme or a NUL byte (and ``destroy`` a missing store), raises
    ``InvalidArgumentError`` in the caller, with the directory tree unchanged: no directory,
    no object, no lease."""
    shards = 2 if layout == "sharded" else None
    good = f"file://{tmp_path}/good"
    lr.open(good, shards=shards).close()
    (tmp_path / "a-file").write_bytes(b"not a store")
    bad_urls = {"missing": f"file://{tmp_path}/missing", "file": f"file://{tmp_path}/a-file",
                "scheme": "nope://x", "nul": f"file://{tmp_path}/x\0y"}
    calls = {
        "reader": lambda u: lr.reader(u),
        "admin": lambda u: lr.admin(u).list_checkpoints(),
        "compare a": lambda u: lr.compare(u, good),
        "compare b": lambda u: lr.compare(good, u),
        "clone from": lambda u: lr.clone(u, f"file://{tmp_path}/clone"),
        "gc": lambda u: lr.gc(u),
        "destroy": lambda u: lr.destroy(u),
        "backup from": lambda u: lr.admin(u).backup(f"file://{tmp_path}/bak"),
    }
    before = _tree(tmp_path)
    for (what, url), (name, call) in itertools.product(bad_urls.items(), calls.items()):
        with pytest.raises(lr.InvalidArgumentError):
            call(url)
        assert _tree(tmp_path) == before, (what, name)
    with lr.open(good) as store:
        before = _tree(tmp_path)
        for what, url in bad_urls.items():
            if what == "missing":
                continue  # a backup or a clone makes its new store there
            for name, call in (("backup to", lambda u: store.backup(u)),
                               ("clone to", lambda u: lr.clone(good, u)),
                               ("replicate to", lambda u: lr.replicate(store, u))):
                with pytest.raises(lr.InvalidArgumentError):
                    call(url)
                assert _tree(tmp_path) == before, (what, name)
