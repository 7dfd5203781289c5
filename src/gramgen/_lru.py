"""Bounded, thread-safe least-recently-used maps.

:class:`SizedLRU`, for the automata that compiles share: equal regexes give equal
automata, and automata are immutable, so a compile may reuse what an earlier one built
(the same bounded string under many properties of a schema, the same format across
schemas). What bounds it is the total size of its values, not their number: one large
automaton can weigh as much as thousands of small ones.

:class:`LRU`, bounded by the number of entries: the per-grammar caches of masks and exit
walks, whose values are all alike.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_ALL: "weakref.WeakSet[SizedLRU]" = weakref.WeakSet()
#: functools caches of compile products (see :func:`cleared_with_all`)
_FUNCTION_CACHES: list = []


def cleared_with_all(fn):
    """Decorator for a ``functools.lru_cache`` function whose results are compile
    products (not static tables): :func:`clear_all` empties it too."""
    _FUNCTION_CACHES.append(fn)
    return fn


def clear_all() -> None:
    """Empty every cache of this kind (the DFAs, the code-point automata) and the
    function caches of compile products: a compile after this builds anew everything but
    what is kept per vocabulary or layout from fixed inputs (the token table, the standard
    classes of JSON values and their lexemes' automata) and the constants of the JSON
    Schema formats (their regexes, code-point automata and spellings), as a benchmark of
    cold compiles needs."""
    for cache in list(_ALL):
        cache.clear()
    for fn in _FUNCTION_CACHES:
        fn.cache_clear()


class SizedLRU(Generic[V]):
    """Values kept while their sizes add up to at most ``budget``, least recently used
    out first; a value larger than ``budget // 4`` is not kept at all."""

    def __init__(self, budget: int, size_of: Callable[[V], int]):
        self.budget = budget
        self._size_of = size_of
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self.total = 0
        self._lock = threading.Lock()
        _ALL.add(self)

    def get(self, key: Hashable) -> V | None:
        """The value of ``key`` (now the most recently used), or None. Raises TypeError
        for an unhashable key."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Hashable, value: V) -> None:
        size = self._size_of(value)
        if size > self.budget // 4:
            return
        with self._lock:
            before = len(self._items)
            self._items.setdefault(key, value)   # (one lookup: keys can be deep tuples)
            if len(self._items) == before:
                return
            self.total += size
            while self.total > self.budget:
                _, old = self._items.popitem(last=False)
                self.total -= self._size_of(old)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.total = 0

    def __len__(self) -> int:
        return len(self._items)

    def values(self) -> list[V]:
        with self._lock:
            return list(self._items.values())


class LRU(Generic[K, V]):
    """At most ``maxsize`` entries (0: none), the least recently used out first.

    Values must not be None (None stands for absent). :meth:`put` takes a lock; the
    lookups take none, for the mask path: each is one or two operations of the C
    ``OrderedDict``, atomic under the GIL, and a key another thread evicts between the
    lookup and the reordering is simply not made recent.
    """

    __slots__ = ("maxsize", "_items", "_lock")

    def __init__(self, maxsize: int):
        if maxsize < 0:
            raise ValueError(f"maxsize must be at least 0, not {maxsize}")
        self.maxsize = maxsize
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value of ``key``, now the most recently used, or None."""
        found = self._items.get(key)
        if found is not None:
            try:
                self._items.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile
                pass
        return found

    def peek(self, key: K) -> V | None:
        """The value of ``key`` or None, leaving the order as it is (a cache read this
        way keeps its entries in the order they were put: first in, first out)."""
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        """Store ``value`` (a key already present keeps its place in the order), then
        drop the least recently used entries beyond ``maxsize``."""
        with self._lock:
            items = self._items
            items[key] = value
            while len(items) > self.maxsize:
                items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items
