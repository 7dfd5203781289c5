def zeros(rows, cols):
    return [[0.0] * cols for _ in range(rows)]


def identity(n):
    m = zeros(n, n)
    for i in range(n):
        m[i][i] = 1.0
    return m


def matmul(a, b):
    n, k, m = len(a), len(b), len(b[0])
    assert len(a[0]) == k, "shape mismatch"
    out = zeros(n, m)
    for i in range(n):
        for j in range(m):
            acc = 0.0
            for t in range(k):
                acc += a[i][t] * b[t][j]
            out[i][j] = acc
    return out


def transpose(a):
    return [list(row) for row in zip(*a)]


def power(a, e):
    result = identity(len(a))
    while e > 0:
        if e & 1:
            result = matmul(result, a)
        a = matmul(a, a)
        e >>= 1
    return result


M = [[1, 1], [1, 0]]
print(power(M, 10)[0][1], transpose([[1, 2, 3], [4, 5, 6]]))
print(0x1F, 0o17, 0b1010, 1_000_000, 3.14e-2, 2j, 1e10, .5, 7.)
