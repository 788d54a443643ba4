"""`jevfleet haproxy-conf`: the configuration it renders from conf/haproxy.cfg, checked by HAProxy
itself where it is installed (make test installs it when run as root)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from jevfleet.haproxy import render_haproxy_conf
from shared.config import default_settings


def render(tmp_path, retry: bool) -> str:
    return render_haproxy_conf(default_settings(), ["10.0.0.2:8017", "10.0.0.3:8017"], bind="127.0.0.1:8080",
                               stats_socket=str(tmp_path / "s.sock"), retry=retry)


def test_every_gateway_is_a_health_checked_server_and_retries_can_be_left_out(tmp_path):
    with_retries, without = render(tmp_path, True), render(tmp_path, False)
    assert "server gw1 10.0.0.2:8017 check" in with_retries and "server gw2 10.0.0.3:8017 check" in with_retries
    assert "option httpchk GET /health" in with_retries
    assert "option redispatch" in with_retries and "retry-on none" not in with_retries
    assert "option redispatch" not in without and "retry-on none" in without
    assert "json_query('$.state')" in with_retries  # the template's $$ came out as one $


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
@pytest.mark.parametrize("retry", [True, False])
def test_haproxy_accepts_the_rendered_configuration(tmp_path, retry):
    conf = tmp_path / "haproxy.cfg"
    conf.write_text(render(tmp_path, retry))
    check = subprocess.run(["haproxy", "-c", "-f", str(conf)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
