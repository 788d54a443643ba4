"""The one thread of a process that calls into llama.cpp: it loads the engine, warms it, and
then serves (runs the scheduler) until told to stop.

Invariant: every llama_decode of the process, the preamble pin and the warmup included, runs on
this thread. Why it matters: ggml's CPU backend runs each graph in an OpenMP parallel region, and
libgomp keeps a team of threads per thread that opens such regions. A model loaded and warmed on
the main thread but served from another one leaves a second, idle team behind; once libgomp manages
more threads than the process has cores it stops spinning at barriers, and each of the few hundred
barriers of a decode then sleeps and is woken. On two cores that cost a W1 request about 25 ms
(bench/decode_cost.py, in git at 4a17b4c, measured it: 'decode on the load thread' vs 'decode on
another thread').
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

Served = TypeVar("Served")


class ModelThread(threading.Thread, Generic[Served]):
    """load() then serve(loaded), both on this thread; wait_loaded() hands `loaded` over."""

    def __init__(self, load: Callable[[], Served], serve: Callable[[Served], None], *,
                 name: str = "model", daemon: bool = False) -> None:
        super().__init__(name=name, daemon=daemon)
        self._load = load
        self._serve = serve
        self._loaded = threading.Event()
        self._value: Served | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._value = self._load()
        except BaseException as exc:  # handed to wait_loaded: its caller says why, in one line for a refusal,
            self._error = exc  # so the thread prints no traceback of its own (`jevfleet serve` must not)
            return
        finally:
            self._loaded.set()
        self._serve(self._value)

    def wait_loaded(self) -> Served:
        """Block until load() returned; raises RuntimeError (from its exception) if it failed."""
        self._loaded.wait()
        if self._error is not None:
            raise RuntimeError(f"loading the model failed: {self._error!r}") from self._error
        return self._value  # type: ignore[return-value]  # set whenever there is no error
