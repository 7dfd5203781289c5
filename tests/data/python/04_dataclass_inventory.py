from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0
    tags: List[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.price * self.quantity


@dataclass(frozen=True)
class Discount:
    code: str
    percent: float


class Inventory:
    def __init__(self) -> None:
        self.items: Dict[str, Item] = {}

    def add(self, item: Item) -> None:
        existing = self.items.get(item.name)
        if existing is None:
            self.items[item.name] = item
        else:
            existing.quantity += item.quantity

    def find(self, tag: str) -> List[Item]:
        return [it for it in self.items.values() if tag in it.tags]

    def value(self, discount: Optional[Discount] = None) -> float:
        total = sum(it.total for it in self.items.values())
        if discount is not None:
            total *= 1 - discount.percent / 100
        return round(total, 2)


inv = Inventory()
inv.add(Item("apple", 0.5, 10, ["fruit"]))
inv.add(Item("pear", 0.75, quantity=4, tags=["fruit", "green"]))
print(inv.value(Discount("SAVE10", 10.0)))
