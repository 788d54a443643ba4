"""deploy/: the Kubernetes manifests agree with the settings, the image and each other, and the
changes tests/podman_kube.py makes for podman are only those it says (no podman, no model)."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from deploy.bake_model import baked_profile
from deploy.image import CONTAINERFILE
from shared.config import Settings, load_settings
from tests import podman_kube as kube

DOCS = kube.load_manifests()
UNIT = kube.find(DOCS, "Deployment", "jevfleet-unit")
FRONT = kube.find(DOCS, "Deployment", "jevfleet-front")
CONFIG = kube.find(DOCS, "ConfigMap", "jevfleet-config")


@pytest.fixture
def pod_settings(tmp_path, monkeypatch):
    """The settings a unit's processes read: the ConfigMap's TOML, as JEV_CONFIG names it."""
    (tmp_path / "jevfleet.toml").write_text(CONFIG["data"]["jevfleet.toml"])
    for name in [n for n in os.environ if n.startswith("JEV_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("JEV_CONFIG", str(tmp_path / "jevfleet.toml"))
    return load_settings()


def env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def test_the_image_bakes_the_model_the_units_serve(pod_settings):
    """The image build's bake step names its profile as serve does: with neither a profile nor a
    model set (the settings' defaults) that is the default profile, whose model comes from a
    package (an empty profile name once stopped the build; a warm image store hid it)."""
    default = Settings.model_fields["default_profile"].default
    profile = baked_profile(pod_settings)
    assert profile.name == default and (profile.package or profile.parts)
    assert baked_profile(load_settings({"profile": "", "model": ""})).name == default


def test_every_resource_is_listed_and_the_hpa_scales_the_unit_deployment():
    kinds = sorted(d["kind"] for d in DOCS)
    assert kinds == ["ConfigMap", "Deployment", "Deployment", "PodDisruptionBudget", "Secret", "Service", "Service"]
    hpa = yaml.safe_load((kube.MANIFESTS / "hpa.yaml").read_text())
    assert hpa["spec"]["scaleTargetRef"]["name"] == UNIT["metadata"]["name"]


def test_units_are_guaranteed_qos_in_whole_cores_and_their_workers_fill_them(pod_settings):
    for deployment in (UNIT, FRONT):
        resources = kube.containers(deployment)[0]["resources"]
        assert resources["requests"] == resources["limits"], deployment["metadata"]["name"]
        assert re.fullmatch(r"[1-9][0-9]*", resources["limits"]["cpu"]), "whole cores, for the static CPU manager"
    cores = int(kube.containers(UNIT)[0]["resources"]["limits"]["cpu"])
    assert pod_settings.workers * pod_settings.cores_per_worker == cores


def test_the_grace_period_covers_the_gateway_drain_and_then_the_workers_stop(pod_settings):
    stopwaitsecs = int(pod_settings.deadline_s) + 5  # jevfleet/supervise.py: each program's stop limit
    grace = UNIT["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= 2 * stopwaitsecs
    prestop = kube.containers(UNIT)[0]["lifecycle"]["preStop"]["exec"]["command"]
    assert f"COPY deploy/prestop.sh {prestop[0]}" in CONTAINERFILE.read_text()


def test_probes_and_scrape_annotations_use_the_units_port_and_routes(pod_settings):
    unit = kube.containers(UNIT)[0]
    for name in ("startupProbe", "readinessProbe"):
        assert unit[name]["httpGet"] == {"path": "/health?ready", "port": pod_settings.port}
    assert unit["livenessProbe"]["httpGet"] == {"path": "/health", "port": pod_settings.port}
    annotations = UNIT["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(pod_settings.port),
                           "prometheus.io/path": "/metrics"}


def test_config_and_key_reach_both_deployments_and_the_front_finds_the_units(pod_settings):
    secret = kube.find(DOCS, "Secret")
    for deployment in (UNIT, FRONT):
        container = kube.containers(deployment)[0]
        assert env(container)["JEV_CONFIG"]["value"].startswith(container["volumeMounts"][0]["mountPath"] + "/")
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        assert volumes[0]["configMap"]["name"] == CONFIG["metadata"]["name"]
    ref = env(kube.containers(UNIT)[0])["JEV_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    headless = kube.headless_service(DOCS)
    assert headless["spec"]["selector"] == UNIT["spec"]["selector"]["matchLabels"]
    args = " ".join(kube.containers(FRONT)[0]["args"])
    assert f"haproxy-conf {headless['metadata']['name']}:{pod_settings.port} --discover" in args


def test_for_podman_changes_names_image_secret_and_ports_only():
    played = list(yaml.safe_load_all(kube.for_podman(DOCS, "jevfleet-unit", tag="jevk8s1", image="img:1",
                                                     secret="jevk8s1-key")))
    config, unit = played
    assert config["metadata"]["name"] == "jevk8s1-jevfleet-config" and config["data"] == CONFIG["data"]
    assert unit["metadata"]["name"] == "jevk8s1-jevfleet-unit"
    container = kube.containers(unit)[0]
    assert container["image"] == "img:1" and "ports" not in container
    assert env(container)["JEV_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "jevk8s1-key"
    assert unit["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == "jevk8s1-jevfleet-config"
    original = kube.containers(UNIT)[0]
    assert {k: v for k, v in container.items() if k not in ("image", "ports", "env")} == \
           {k: v for k, v in original.items() if k not in ("image", "ports", "env")}
    assert "ports" in original and original["image"] != "img:1"  # the manifests themselves are untouched


def test_units_are_not_pinned_under_the_default_cpu_policy_and_the_comments_say_how_to_use_the_static_one(
        pod_settings):
    assert pod_settings.pin_workers == 0  # every pod sees the whole node: pinned, all units share its first cores
    toml = CONFIG["data"]["jevfleet.toml"]
    assert "--cpu-manager-policy=static" in toml and "pin_workers = 1" in toml


def test_the_static_cpu_policy_as_played_gives_each_unit_its_own_cpus_and_pins_within_them():
    assert kube.split_cpus([0, 1], 2) == [[0], [1]]
    assert kube.split_cpus([2, 3, 4, 5, 6], 2) == [[2, 3], [4, 5]]
    with pytest.raises(ValueError, match="cannot have CPUs of their own"):
        kube.split_cpus([0], 2)
    played = kube.for_podman(DOCS, "jevfleet-unit", tag="jevk8s1", image="img:1", secret="jevk8s1-key")
    config, *pods = yaml.safe_load_all(kube.static_cpu_policy(played, "jevk8s1-jevfleet-unit", [[0], [1]]))
    assert [p["kind"] for p in pods] == ["Pod", "Pod"]
    assert [p["metadata"]["name"] for p in pods] == ["jevk8s1-jevfleet-unit-pod-0", "jevk8s1-jevfleet-unit-pod-1"]
    assert tomllib.loads(config["data"]["jevfleet.toml"])["pin_workers"] == 1
    for pod, cpus in zip(pods, ("0", "1")):
        (container,) = pod["spec"]["containers"]
        assert container["args"] == ["python", "-c", kube.AFFINITY, cpus, *kube.containers(UNIT)[0]["args"]]
        assert pod["spec"]["volumes"][0]["configMap"]["name"] == "jevk8s1-jevfleet-config"
    # The stand-in for the cpuset, run: the command it starts may use those CPUs only.
    cpu = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", kube.AFFINITY, str(cpu), sys.executable, "-c",
                          "import os; print(sorted(os.sched_getaffinity(0)))"], capture_output=True, text=True,
                         timeout=30)
    assert out.stdout.strip() == f"[{cpu}]", out.stderr


def test_the_podman_secret_holds_every_key_base64_encoded():
    secret = {"data": {"a": base64.b64encode(b"x").decode()}, "stringData": {"api-key": "k3y"}}
    assert json.loads(kube.podman_secret_json(secret)) == {"a": "eA==", "api-key": "azN5"}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its kustomize) is not installed")
def test_kustomize_renders_the_same_resources():
    rendered = subprocess.run(["kubectl", "kustomize", str(kube.MANIFESTS)], capture_output=True, text=True,
                              timeout=60, check=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == \
           sorted((d["kind"], d["metadata"]["name"]) for d in DOCS)
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "jevfleet" for d in docs)


def test_the_image_copies_every_package_the_command_imports():
    """The image copies packages one by one (a layer each): one the command imports and the image
    leaves out would fail only when a pod starts."""
    from tests.test_harness import imported_modules, sources

    served = {m.split(".")[0] for p in sources("jevfleet", "client", "quality") for m in imported_modules(p)
              if "harness" not in p.parts}
    first_party = served & {"shared", "gateway", "worker", "client", "jevfleet", "quality", "loadtest", "bench"}
    copied = set(re.findall(r"^COPY (\w+) ", CONTAINERFILE.read_text(), re.M))
    assert first_party and first_party <= copied
