from __future__ import annotations

import pytest

from tests.fleet import Fleet, start_fleet


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """One real fleet (supervisord, gateway, one worker, the real model) shared by the
    black-box tests that only read from it."""
    f = start_fleet(tmp_path_factory.mktemp("fleet"), workers=1)
    yield f
    assert f.stop() == 0, f.logs()
