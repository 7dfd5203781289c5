class Stack:
    """A LIFO stack backed by a list."""

    def __init__(self, items=None):
        self._items = list(items) if items is not None else []

    def push(self, item):
        self._items.append(item)

    def pop(self):
        if not self._items:
            raise IndexError("pop from empty stack")
        return self._items.pop()

    def peek(self):
        return self._items[-1] if self._items else None

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        return f"Stack({self._items!r})"


def balanced(text: str) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = Stack()
    for ch in text:
        if ch in "([{":
            stack.push(ch)
        elif ch in pairs:
            if len(stack) == 0 or stack.pop() != pairs[ch]:
                return False
    return len(stack) == 0
