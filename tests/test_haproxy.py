"""`jevfleet haproxy-conf`: the configuration it renders from conf/haproxy.cfg, checked by HAProxy
itself where it is installed (make test installs it when run as root)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from jevfleet.haproxy import qualified, render_haproxy_conf
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


def test_discover_turns_one_dns_name_into_server_slots_resolved_again(tmp_path):
    conf = render_haproxy_conf(default_settings(), ["units.example:8017"], bind=":8017",
                               stats_socket=str(tmp_path / "s.sock"), discover=8)
    assert "server-template gw 8 units.example:8017 check resolvers dns init-addr none" in conf
    assert "\nresolvers dns\n    parse-resolv-conf\n" in conf and "server gw1" not in conf
    assert "    hold obsolete 30s\n" in conf  # a unit missing from one DNS answer keeps its slot
    with pytest.raises(ValueError):
        render_haproxy_conf(default_settings(), ["a:1", "b:1"], bind=":1", stats_socket="s", discover=2)


def test_a_short_name_takes_the_first_search_domain_as_a_pods_lookup_would(tmp_path):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.96.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\n")
    assert qualified("jevfleet-units", resolv) == "jevfleet-units.shop.svc.cluster.local"
    assert qualified("units.other.svc.cluster.local", resolv) == "units.other.svc.cluster.local"
    resolv.write_text("nameserver 10.0.0.1\n")
    assert qualified("units", resolv) == "units"


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_haproxy_accepts_the_discovering_configuration(tmp_path):
    conf = tmp_path / "haproxy.cfg"
    conf.write_text(render_haproxy_conf(default_settings(), ["localhost:8017"], bind="127.0.0.1:8080",
                                        stats_socket=str(tmp_path / "s.sock"), discover=4))
    check = subprocess.run(["haproxy", "-c", "-f", str(conf)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
