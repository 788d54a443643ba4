"""The labeled sets in eval/ (see eval/README.md) and how one item becomes a System One request.

A yes/no item is a `noul` question; a choice/score item carries its own criteria. Every item is
asked as a request of its own with the question id "q", exactly as a client would ask it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quality.metrics import Outcome
from shared.config import PROJECT_ROOT

QUESTION_ID = "q"


@dataclass(frozen=True)
class Item:
    id: str
    kind: str  # yes/no: the item's kind (fact, negation, ...); choice/score: the type
    type: str  # noul | choice | score
    state: Any
    question: Any  # the noul question or the choice/score instructions
    criteria: Any  # None for noul; {option: description} for choice; [levels] for score
    answer: Any  # bool for noul; the option name for choice; the level index for score
    split: str
    tag: str = ""  # straightforward (the text states the answer plainly) | adversarial (eval/README.md)

    def request(self, model: str = "jev-latest") -> dict[str, Any]:
        """The request body a client would send for this item."""
        question: dict[str, Any] = {"type": self.type, "instructions": self.question}
        if self.criteria is not None:
            question["criteria"] = self.criteria
        return {"model": model, "state": self.state, "questions": {QUESTION_ID: question}}

    @property
    def labels(self) -> list[str]:
        """The answer options in the order the wire answer's probabilities use."""
        if self.type == "choice":
            return list(self.criteria)
        if self.type == "score":
            return [str(i) for i in range(len(self.criteria))]
        return ["yes", "no"]

    @property
    def answer_index(self) -> int:
        if self.type == "noul":
            return 0 if self.answer else 1
        return self.labels.index(str(self.answer))


TAGS = ("straightforward", "adversarial")


def _tag(row: dict[str, Any]) -> str:
    tag = row.get("tag", "")
    if tag not in ("", *TAGS):
        raise ValueError(f"tag must be one of {', '.join(TAGS)} (or left out), not {tag!r}")
    return tag


def _item(row: dict[str, Any], where: str) -> Item:
    try:
        kind = row.get("type", "noul")
        if kind == "noul":
            if not isinstance(row["answer"], bool):
                raise ValueError("a yes/no answer must be true or false")
            return Item(id=row["id"], kind=row["kind"], type="noul", state=row["state"], question=row["question"],
                        criteria=None, answer=row["answer"], split=row.get("split", ""), tag=_tag(row))
        if kind not in ("choice", "score"):
            raise ValueError(f"unknown type {kind!r}")
        item = Item(id=row["id"], kind=row.get("kind", kind), type=kind, state=row["state"], question=row.get("instructions"),
                    criteria=row["criteria"], answer=row["answer"], split=row.get("split", ""), tag=_tag(row))
        item.answer_index  # the answer must be one of the options
        return item
    except KeyError as exc:
        raise ValueError(f"{where}: missing field {exc.args[0]!r}") from None
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def load_set(paths: str | Path | list[str | Path], split: str = "") -> list[Item]:
    """Every item of one or more JSONL sets, or only those of one split ("fit" / "test")."""
    items = []
    for path in paths if isinstance(paths, list) else [paths]:
        path = Path(path)
        if not path.exists() and not path.is_absolute() and (PROJECT_ROOT / path).exists():
            path = PROJECT_ROOT / path  # eval/yesno.jsonl from any working directory
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                items.append(_item(json.loads(line), f"{path}:{n}"))
    if len({i.id for i in items}) != len(items):
        raise ValueError(f"{paths}: an item id occurs twice")
    if split:
        items = [i for i in items if i.split == split]
        if not items:
            raise ValueError(f"{paths}: no items in split {split!r}")
    return items


def outcome(item: Item, answer: dict[str, Any], margin: float | None = None) -> Outcome:
    """Score-ready form of one wire answer (the `answers.q` object of a response)."""
    if item.type == "noul":
        p = float(answer["noul"])
        probs: tuple[float, ...] = (p, 1.0 - p)
    else:
        probs = tuple(float(answer["probabilities"][label]) for label in item.labels)
    return Outcome(id=item.id, kind=item.kind, type=item.type, probs=probs, answer=item.answer_index, margin=margin,
                   tag=item.tag)


@dataclass(frozen=True)
class Skipped:
    """An item that could not be asked (e.g. a question type the server does not answer)."""

    id: str
    reason: str


def refused(item: Item, status: int, body: dict[str, Any]) -> Skipped:
    """An item a server (or the in-process path) answered with an error: skipped, with its reason."""
    return Skipped(item.id, f"HTTP {status}: {json.dumps(body.get('detail'))[:300]}")
