"""A bounded, thread-safe least-recently-used map, for the automata that compiles share.

Equal regexes give equal automata, and automata are immutable, so a compile may reuse
what an earlier one built (the same bounded string under many properties of a schema,
the same format across schemas). What bounds the map is the total size of its values,
not their number: one large automaton can weigh as much as thousands of small ones.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

_ALL: "weakref.WeakSet[SizedLRU]" = weakref.WeakSet()


def clear_all() -> None:
    """Empty every cache of this kind (the DFAs, the code-point automata): a compile
    after this builds everything anew, as a benchmark of cold compiles needs."""
    for cache in list(_ALL):
        cache.clear()


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
            if key in self._items:
                return
            self._items[key] = value
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
