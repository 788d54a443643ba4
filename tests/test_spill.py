"""The host-memory tier's store (worker/spill.py): its byte budget, exact-prefix lookups and
saving only what it does not hold yet."""
from __future__ import annotations

from worker.spill import SpillStore


def test_a_blob_is_given_back_only_for_its_exact_tokens():
    store = SpillStore(100)
    store.put("k", [1, 2, 3], lambda: b"x" * 10)
    assert store.take("k", [1, 2, 4]) is None  # a key collision never serves other tokens
    assert store.take("k", [1, 2, 3]) == b"x" * 10
    assert store.take("other", [1]) is None


def test_the_budget_drops_the_least_recently_used_and_never_keeps_an_oversized_blob():
    store = SpillStore(100)
    for key in "abc":
        store.put(key, [ord(key)], lambda: b"x" * 40)
    assert store.keys == ("b", "c") and store.bytes == 80
    store.take("b", [ord("b")])  # b is now the most recent: d drops c
    store.put("d", [4], lambda: b"x" * 40)
    assert store.keys == ("b", "d")
    store.put("e", [5], lambda: b"x" * 101)
    assert "e" not in store and store.bytes == 80


def test_nothing_is_saved_twice_or_while_off():
    saved = []

    def save() -> bytes:
        saved.append(1)
        return b"x"

    store = SpillStore(100)
    store.put("k", [1], save)
    store.put("k", [1], save)
    off = SpillStore(0)
    off.put("k", [1], save)
    assert len(saved) == 1 and len(off) == 0 and not off.enabled
    store.clear()
    assert len(store) == 0 and store.bytes == 0 and store.keys == ()
