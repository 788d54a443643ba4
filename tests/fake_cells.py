"""A stand-in for llama.cpp's unified KV cache, precise about where cells go: tokens are placed
first-fit from a head that a removal moves down to the first freed cell (llama_kv_cache's
find_slot/seq_rm), copies share cells, a saved sequence restores first-fit. It remembers each
cell's token, so a test can see what a sequence really holds, and it refuses to append a token
below a cell its sequence already has: the out-of-order placement that changes answers."""
from __future__ import annotations

from dataclasses import dataclass, field

from worker.snapshot_parts import Plan
from worker.snapshots import SnapshotCache


class OutOfOrder(AssertionError):
    pass


@dataclass
class Cell:
    pos: int
    token: int
    seqs: set[int] = field(default_factory=set)


class FakeCells:
    def __init__(self, size: int) -> None:
        self.cells: list[Cell | None] = [None] * size
        self.head = 0
        self.pos_floor: dict[int, int] = {}  # simulated sliding-window loss: positions below are gone

    # --- the SeqBackend protocol -----------------------------------------------------------
    def copy(self, src: int, dst: int, length: int) -> None:
        for c in self.cells:
            if c is not None and src in c.seqs and c.pos < length:
                c.seqs.add(dst)

    def remove(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        lo, hi = max(p0, 0), (p1 if p1 >= 0 else float("inf"))
        if lo == 0 and hi == float("inf"):
            self.pos_floor.pop(seq, None)
        for i, c in enumerate(self.cells):
            if c is not None and seq in c.seqs and lo <= c.pos < hi:
                c.seqs.discard(seq)
                if not c.seqs:
                    self.cells[i] = None
                    self.head = min(self.head, i)

    def save(self, seq: int) -> list[tuple[int, int]]:
        return [(c.pos, c.token) for c in self.cells if c is not None and seq in c.seqs]

    def restore(self, seq: int, blob: list[tuple[int, int]]) -> None:
        self.remove(seq)
        self.place([(seq, pos, tok) for pos, tok in blob])

    def pos_min(self, seq: int) -> int:
        held = [c.pos for c in self.cells if c is not None and seq in c.seqs]
        return max(min(held), self.pos_floor.get(seq, 0)) if held else -1

    # --- what the engine does -------------------------------------------------------------
    def place(self, rows: list[tuple[int, int, int]]) -> None:
        """Decode rows (seq, pos, token) in order, each into the first free cell from head."""
        tops: dict[int, int] = {}
        for seq, pos, tok in rows:
            i = self.head
            while self.cells[i] is not None:
                i += 1
            if seq not in tops:
                tops[seq] = max((k for k, c in enumerate(self.cells) if c is not None and seq in c.seqs), default=-1)
            top, tops[seq] = tops[seq], i
            if i < top:
                raise OutOfOrder(f"seq {seq}: position {pos} would go to cell {i}, below cell {top}")
            self.cells[i] = Cell(pos, tok, {seq})
            self.head = i + 1

    def tokens(self, seq: int) -> list[int]:
        held = sorted((c.pos, c.token) for c in self.cells if c is not None and seq in c.seqs)
        return [tok for _, tok in held]

    def used(self) -> int:
        return sum(c is not None for c in self.cells)

    def in_order(self, seq: int) -> bool:
        pos = [c.pos for c in self.cells if c is not None and seq in c.seqs]
        return pos == sorted(pos)


def run_batch(cache: SnapshotCache, cells: FakeCells, prefixes: list[list[int]],
              suffix: list[int] = (7, 8, 9)) -> Plan:
    """What Engine.run does with the cache, on fake cells: read the plan, share duplicate
    prefixes, read one suffix per request in sequences of its own, keep, clean up. Checks that
    every working sequence holds exactly its prefix before the suffixes are read."""
    work = list(range(len(prefixes)))
    plan = cache.begin(prefixes, work)
    cells.place([(seq, start + i, tok) for seq, start, toks in plan.reads for i, tok in enumerate(toks)])
    for src, dst, n in plan.copies:
        cells.copy(src, dst, n)
    for seq, prefix in zip(work, prefixes):
        assert cells.tokens(seq) == prefix, "a working sequence does not hold its prefix"
    for seq, prefix in zip(work, prefixes):
        wave = 50 + seq
        cells.copy(seq, wave, len(prefix))
        cells.place([(wave, len(prefix) + i, tok) for i, tok in enumerate(suffix)])
        cells.remove(wave)
    cache.end(plan)
    for seq in work:
        cells.remove(seq)
    return plan
