import itertools


def chunks(iterable, size):
    it = iter(iterable)
    while True:
        block = list(itertools.islice(it, size))
        if not block:
            return
        yield block


def flatten(nested):
    for item in nested:
        if isinstance(item, (list, tuple)):
            yield from flatten(item)
        else:
            yield item


def running_mean():
    total = 0.0
    count = 0
    value = yield None
    while value is not None:
        total += value
        count += 1
        value = yield total / count


def primes():
    found = []
    for n in itertools.count(2):
        if all(n % p for p in found if p * p <= n):
            found.append(n)
            yield n


gen = running_mean()
next(gen)
print([gen.send(x) for x in (1, 2, 3)])
print(list(chunks(range(7), 3)), list(flatten([1, [2, (3, 4)], [[5]]])))
print(list(itertools.islice(primes(), 8)))
squares = {n: n * n for n in range(5)}
evens = {n for n in range(10) if n % 2 == 0}
first, *rest = sorted(evens, reverse=True)
