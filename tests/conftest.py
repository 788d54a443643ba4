"""Session fixtures (a real fleet, in-process gateways) and the tiers' markers and guard (tests/tiers.py)."""
from __future__ import annotations

import pytest

from jevfleet.harness.fleet import CHECKED, Fleet, start_fleet
from tests import tiers
from tests.inprocess import InProcessGateway

API_KEY = "jev-test-key"
FLEET_FIXTURES = {"fleet"}  # a test using one of these is a fleet test, marked or not

tiers.install_guard()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Before `-m` selects: the tier follows from the fixtures a test uses, not only its marker."""
    for item in items:
        if FLEET_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("fleet") is None:
            item.add_marker(pytest.mark.fleet)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    tiers.guard(item.nodeid, {m.name for m in item.iter_markers()})


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """One real fleet (supervisord, gateway, one worker, the real model) shared by the
    black-box tests that only read from it."""
    f = start_fleet(tmp_path_factory.mktemp("fleet"), workers=1, extra=CHECKED)
    yield f
    assert f.stop() == 0, f.logs()
    assert not f.lifecycle_breaches()


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> InProcessGateway:
    """The gateway in this process with a scripted worker and no model (tests/inprocess.py)."""
    g = InProcessGateway(tmp_path_factory.mktemp("gateway"))
    yield g
    g.stop()
    assert g.fleet.counters["lifecycle_checks"] > 0 and g.fleet.counters["lifecycle_breaches"] == 0


@pytest.fixture(scope="session")
def auth_gateway(tmp_path_factory: pytest.TempPathFactory) -> InProcessGateway:
    """An in-process gateway that requires API_KEY, shared by the authentication tests."""
    g = InProcessGateway(tmp_path_factory.mktemp("auth_gateway"), api_key=API_KEY)
    yield g
    g.stop()
