"""The clerks' LRU cache (pure)."""

from leveled_ray.files.lru import LruCache


def test_a_look_is_not_a_use():
    """``in`` says whether a key is held without counting a hit or a miss, or making the key
    the most recently used (which a get does)."""
    cache = LruCache(budget=2)
    cache.put("a", 1, 1)
    cache.put("b", 2, 1)
    assert "a" in cache and "z" not in cache
    assert (cache.hits, cache.misses) == (0, 0)
    cache.put("c", 3, 1)  # over budget: the least recently used goes, "a" (only looked at)
    assert "a" not in cache and "b" in cache
    assert cache.get("b") == 2 and cache.get("a") is None
    assert (cache.hits, cache.misses) == (1, 1)
