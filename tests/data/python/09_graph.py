from collections import defaultdict, deque
import heapq


class Graph:
    def __init__(self, directed=False):
        self.directed = directed
        self.adj = defaultdict(list)

    def add_edge(self, u, v, w=1):
        self.adj[u].append((v, w))
        if not self.directed:
            self.adj[v].append((u, w))

    def bfs(self, start):
        seen = {start}
        order = []
        queue = deque([start])
        while queue:
            node = queue.popleft()
            order.append(node)
            for nxt, _ in self.adj[node]:
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return order

    def dijkstra(self, source):
        dist = {source: 0}
        heap = [(0, source)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist.get(u, float("inf")):
                continue
            for v, w in self.adj[u]:
                nd = d + w
                if nd < dist.get(v, float("inf")):
                    dist[v] = nd
                    heapq.heappush(heap, (nd, v))
        return dist


g = Graph()
for a, b, w in [("a", "b", 4), ("a", "c", 1), ("c", "b", 2), ("b", "d", 5)]:
    g.add_edge(a, b, w)
print(g.bfs("a"), g.dijkstra("a"))
