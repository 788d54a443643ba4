"""What a GGUF file says about itself, read before anything is derived from it: its architecture,
its chat template, its BOS/EOS texts and control tokens, and a vocabulary to tokenize with.

A file that cannot be served is refused here with one line that says why (ModelFileError, which
the CLI turns into exit 2 like any profile error): not a GGUF, or an architecture this build of
llama.cpp cannot load. Refusing at this point, before a worker loads the weights, is what keeps a
file that does not fit from showing up later as answers at chance.

The header is read by ggml's GGUF reader (shared/gguf_header.py, the one llama.cpp loads with),
the vocabulary by llama.cpp (vocab_only): every tokenization in the derivation is the one gateway
and workers will do.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from shared.gguf_header import GgufHeader
from shared.llama import captured_log, llama, load_model, token_text
from shared.llama import tokenize as llama_tokenize
from shared.profiles import ProfileError

GGUF_MAGIC = b"GGUF"


class ModelFileError(ProfileError):
    """A model file that cannot be served, in one line naming the file and why."""


@dataclass(frozen=True)
class GgufFile:
    path: Path
    architecture: str
    name: str  # general.name, or the file's stem
    licence: str
    chat_template: str  # "" for a base model
    bos: str  # the BOS and EOS tokens' texts, as chat templates use them
    eos: str
    add_bos: bool  # tokenizer.ggml.add_bos_token (llama.cpp's default when absent: true)
    control: tuple[str, ...]  # texts of the vocabulary's control tokens (read for a chat template only)
    tokenize: Vocabulary


class Vocabulary:
    """shared/llama.tokenize bound to a vocabulary-only model, which it keeps alive."""

    def __init__(self, model) -> None:
        self.model = model
        self.vocab = llama().llama_model_get_vocab(model)

    def __call__(self, text: str, *, add_bos: bool = False, special: bool = False) -> list[int]:
        return llama_tokenize(self.vocab, text, add_bos=add_bos, special=special)


# The header's strings a profile is derived from, in the order read_gguf unpacks them
_STRINGS = ("general.architecture", "general.name", "general.license", "tokenizer.chat_template")
UNREADABLE = "model file {}: not a GGUF file ggml can read (its header does not parse)"  # shared/memory.py says it too


def layer_bytes(path: Path) -> int:
    """Bytes of the tensors every token of a prompt passes through whole: the file less its token
    embeddings and output matrix, of which a token reads one row (or, for the output, the rows of
    the tokens read out). What a forward pass costs per token, far better than the file's size:
    a 262k vocabulary is a third of Gemma 3 1B's file and a twentieth of MiniCPM 1B's."""
    with GgufHeader(path) as header:
        if header is None:
            raise ModelFileError(UNREADABLE.format(path))
        tables = [header.tensor(name) for name in ("token_embd.weight", "output.weight")]
    return Path(path).stat().st_size - sum(table.size for table in tables if table)


def _control_texts(vocab) -> tuple[str, ...]:
    """Every control token's text (<|im_start|>, <start_of_turn>, ...): the chat template's markers,
    which must be parsed as special tokens in template text and never in a user's text."""
    lib = llama()
    texts = []
    for token in range(lib.llama_vocab_n_tokens(vocab)):
        if lib.llama_vocab_get_attr(vocab, token) & lib.LLAMA_TOKEN_ATTR_CONTROL:
            text = token_text(vocab, token).decode("utf-8", "replace")
            if text:
                texts.append(text)
    return tuple(sorted(set(texts), key=lambda t: (-len(t), t)))


def read_gguf(path: Path) -> GgufFile:
    """The file's facts and vocabulary; ModelFileError when it is not a GGUF or llama.cpp cannot load it."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelFileError(f"model file {path} does not exist")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"model file {path}: not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
    with GgufHeader(path) as header:
        if header is None:
            raise ModelFileError(UNREADABLE.format(path))
        arch, name, licence, template = (header.string(key) for key in _STRINGS)
        add_bos = header.boolean("tokenizer.ggml.add_bos_token", True)  # llama.cpp's default when absent
    with captured_log() as lines:
        try:
            model = load_model(path, vocab_only=True)
        except RuntimeError:
            model = None
    if model is None:
        said = [line.split("error loading model:", 1)[1].strip() for line in lines if "error loading model:" in line]
        raise ModelFileError(f"model file {path}: llama.cpp (llama-cpp-python {llama().__version__}) cannot load it "
                             f"(architecture {arch or 'not stated'!r}): {said[-1] if said else 'no reason given'}")
    sys.stderr.write("".join(lines))  # a loaded file's warnings stay visible
    lib = llama()
    vocab = lib.llama_model_get_vocab(model)

    def text_of(token: int) -> str:
        return token_text(vocab, token).decode("utf-8", "replace") if token >= 0 else ""

    return GgufFile(
        path=path, architecture=arch, name=name or path.stem, licence=licence, chat_template=template,
        bos=text_of(lib.llama_vocab_bos(vocab)), eos=text_of(lib.llama_vocab_eos(vocab)), add_bos=add_bos,
        control=_control_texts(vocab) if template else (),
        tokenize=Vocabulary(model),
    )

