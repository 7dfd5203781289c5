"""Assorted syntax: scopes, parameters, operators, continuation lines."""
import os, os.path as osp, sys
from typing import (
    Any,
    Callable,  # trailing comment inside brackets
)

counter = 0
CONFIG = {
    "name": "demo",
    "sizes": [1, 2, 3,],
    "nested": {"a": (1,), "b": ()},
}


def bump(step=1):
    global counter
    counter += step
    return counter


def outer():
    total = 0

    def inner(x, /, y, *, scale=2, **extra) -> int:
        nonlocal total
        total += (x + y) * scale
        return total

    return inner


def describe(value: Any, *args, sep: str = ", ", **kwargs) -> str:
    parts = [repr(value), *map(str, args)]
    parts += [f"{k}={v}" for k, v in sorted(kwargs.items())]
    return sep.join(parts)


apply: Callable[[int], int] = lambda n, k=3: n * k if n > 0 else -n
x = 5; y = 10; z = x if x < y else y
ok = 0 < x <= y < 100 and x is not None and "q" not in CONFIG
mask = ~x & 0xFF | y << 2 ^ (x >> 1) % 7 // 2 - -3 ** 2
long_total = x + \
    y + z
if (n := len(CONFIG)) > 2 and (
    CONFIG["name"] == "demo"
    or not CONFIG["sizes"]
):
    print("big config", n)
data = list(range(20))
print(data[::2], data[1:5], data[-3:], data[:], ..., data[len(data) // 2])
del data[0], CONFIG["nested"]
message = ("implicit " "string "
           'concatenation')
f = outer()
print(f(1, 2, scale=3), describe(1, 2, 3, sep="-", end="!"), bump(), apply(4))
print(osp.join("a", "b"), sys.version_info >= (3,), message, mask, ok, long_total)
assert isinstance(counter, int), "counter must be an int"
for i in range(3):
    while True:
        if i:
            with open(os.devnull, "w") as sink:
                try:
                    if i > 1:
                        print(i, file=sink)
                except OSError:
                    pass
        break
    else:
        pass
