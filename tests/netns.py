"""The harness's network namespaces (jevfleet/harness/netns.py) for tests: the same helpers, and
a test that cannot make namespaces here is skipped, saying why."""
from __future__ import annotations

import pytest

from jevfleet.harness.netns import add, delete, enter, exec_in, remove_leftovers, run_in, sh, unavailable

__all__ = ["add", "delete", "enter", "exec_in", "remove_leftovers", "require_netns", "run_in", "sh"]


def require_netns() -> None:
    """Skip, saying why, where namespaces cannot be made (no root, no `ip`)."""
    if reason := unavailable():
        pytest.skip(reason)
