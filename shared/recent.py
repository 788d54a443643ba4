"""A bounded set of the keys seen most recently: the gateway's memory of which state prefixes
it sent to each worker (gateway/routing.py) and a worker's list of recently missed prefixes
(worker/snapshots.py) are both one of these."""
from __future__ import annotations

from collections import OrderedDict


class RecentKeys:
    """The last `size` distinct keys touched; touching a key again makes it the newest."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def touch(self, key: str) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)

    def clear(self) -> None:
        self._keys.clear()

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)
