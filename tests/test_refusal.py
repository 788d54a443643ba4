"""shared/refusal.py: the one line a process that cannot start writes last, and finding it again."""
from __future__ import annotations

from shared.refusal import MARK, REFUSED, reason, refusal_in, refuse


def test_the_reason_is_one_line_and_never_empty():
    assert reason(ValueError("bad cores\nmore detail")) == "bad cores"
    assert reason(MemoryError()) == "MemoryError"


def test_the_refusal_line_is_written_to_stderr_and_read_back_from_a_log(capsys):
    assert refuse("worker w00", FileNotFoundError("model file /m.gguf does not exist")) == REFUSED == 2
    line = capsys.readouterr().err
    assert line == f"jevfleet worker w00: {MARK}model file /m.gguf does not exist\n"
    log = "2026 INFO loading\nTraceback (most recent call last):\n  ...\n" + line + "a late line from a thread\n"
    assert refusal_in(log) == "model file /m.gguf does not exist"


def test_a_log_without_a_refusal_has_none_and_the_last_one_counts():
    assert refusal_in("2026 INFO ready\n") is None
    assert refusal_in(f"x: {MARK}old\ny: {MARK}new\n") == "new"
