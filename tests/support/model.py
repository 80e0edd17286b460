"""A model (a dict) of a store's objects, written through the store and checked against
every read it offers."""

import random

import leveled_ray as lr


def write_rounds(store, model: dict, rounds: int, rng: random.Random,
                 keys: int = 300) -> list[tuple[str, str]]:
    """Puts (with an index term each) and deletes of random keys, mirrored in ``model``, as
    cross-shard ``put_many`` batches; returns each change's ``(key, kind)``."""
    written = []
    for _ in range(rounds):
        batch = []
        for i in rng.sample(range(keys), 40):
            key = f"k{i:04d}"
            if rng.random() < 0.15:
                batch.append(lr.Delete("b", key))
                model.pop(key, None)
                written.append((key, "delete"))
            else:
                value = b"%d:%d" % (i, rng.randrange(1 << 30))
                batch.append(lr.Put("b", key, value, indexes=[("add", "n_int", i % 7)]))
                model[key] = value
                written.append((key, "put"))
        store.put_many(batch)
    return written


def check_model(store, model: dict) -> None:
    """Every read the store offers agrees with the model."""
    keys = [f"k{i:04d}" for i in range(300)]
    assert store.get_many([("b", k) for k in keys]) == [model.get(k) for k in keys]
    assert [k for _, k in store.fold_keys("b")] == sorted(model)
    assert [(k, v) for _, k, v in store.fold_objects("b")] == sorted(model.items())
    for term in (0, 3):
        assert list(store.index_query("b", "n_int", term, term)) == sorted(
            k for k in model if int(k[1:]) % 7 == term)
    assert sorted(k for _, k, _ in store.fold_heads("b")) == sorted(model)
