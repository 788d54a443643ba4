"""The plain reading a llama-server user would write, to set beside the served answers.

One user turn in the model's own chat template ("<text>\n\nQuestion: <question>\nAnswer Yes or No."),
the generation prompt, and P(yes) from the first answer token's distribution over the profile's
yes and no words: no system turn, no examples, no calibration, each prompt read whole by
llama-cpp-python as a client of llama.cpp would. Yes/no items only; choice and score items are
skipped (their plain reading is a generation, not one token). Used by `jevfleet eval --reading plain`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
from llama_cpp import Llama, llama_get_logits_ith  # a plain client's own path, not the worker's engine

from quality.items import Item, Skipped, outcome
from quality.metrics import Outcome
from shared.derive import render_chat
from shared.gguf_file import read_gguf
from shared.profiles import Profile, answer_ids
from worker.head import yes_no_margin

USER_TURN = "{state}\n\nQuestion: {question}\nAnswer Yes or No."


class PlainRunner:
    """Answers yes/no items by the plain reading of one GGUF, in this process."""

    def __init__(self, model: Path, profile: Profile, threads: int) -> None:
        self.gguf = read_gguf(model)
        self.llm = Llama(str(model), n_ctx=4096, n_threads=threads, n_batch=512, verbose=False)
        tokenize = lambda text, **kw: self.llm.tokenize(text.encode(), add_bos=False, special=kw.get("special", False))
        self.yes, self.no = answer_ids(tokenize, profile.yes), answer_ids(tokenize, profile.no)

    def margin(self, item: Item) -> float:
        """logsumexp(yes logits) − logsumexp(no logits) of the first answer token."""
        prompt = render_chat(self.gguf, [{"role": "user", "content": USER_TURN.format(state=item.state,
                                                                                      question=item.question)}])
        tokens = self.llm.tokenize(prompt.encode(), add_bos=False, special=True)
        self.llm.reset()
        self.llm.eval(tokens)
        # the last token's logits as llama.cpp left them (Llama.scores is filled only with logits_all)
        row = np.ctypeslib.as_array(llama_get_logits_ith(self.llm.ctx, -1), shape=(self.llm.n_vocab(),))
        row = row.astype(np.float64)
        return yes_no_margin(row.__getitem__, self.yes, self.no)

    def ask(self, items: list[Item], progress: Callable[[int], None] = lambda n: None) -> list[Outcome | Skipped]:
        results: list[Outcome | Skipped] = []
        for item in items:
            if item.type != "noul":
                results.append(Skipped(item.id, "the plain reading answers yes/no questions only"))
            else:
                margin = self.margin(item)
                results.append(outcome(item, {"noul": 1.0 / (1.0 + np.exp(-margin))}, margin))
            progress(1)
        return results

    def close(self) -> None:
        self.llm.close()
