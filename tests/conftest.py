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


API_KEY = "jev-test-key"


@pytest.fixture(scope="session")
def auth_fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """A second real fleet started with JEV_API_KEY set, shared by the authentication tests."""
    f = start_fleet(tmp_path_factory.mktemp("auth_fleet"), workers=1, env={"JEV_API_KEY": API_KEY})
    yield f
    assert f.stop() == 0, f.logs()
