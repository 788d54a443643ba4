"""deploy/kubernetes/ played by podman: the manifests as a user applies them, the few changes podman
4.3 needs, and the kubelet's part that podman does not do, for tests/test_kubernetes.py.

What podman 4.3's `kube play` does with these kinds, and what stands in here:

- Deployment: one pod per replica, `<name>-pod-<i>`, on the network given with --network. Kept.
- ConfigMap: used by the pods of the same YAML, as a named volume podman makes. Kept, played with
  each Deployment, renamed with the run's tag.
- Secret: stored as YAML, but env `secretKeyRef` then wants JSON and fails. The test creates the
  podman secret itself in the form env references read (a JSON object of base64 values).
- Service: not supported. The headless Service becomes a network alias every unit pod carries, so
  its name resolves to every unit (aardvark-dns), as the cluster's DNS resolves it; the front's
  Service is the front pod's address on the test's own network.
- containerPort: published on the host's 0.0.0.0 with the same number, so two replicas collide and
  the port is open to the outside: dropped (in Kubernetes it is informative).
- Probes, preStop, terminationGracePeriodSeconds: not run or ignored (podman stops with its own
  10 s). Readiness is polled by the test (/health?ready, as the probe), and deleting a pod is done
  as the kubelet does it: the preStop command in the container, then SIGTERM with the pod's grace
  period, then removal.
- The network: a bridge network as a cluster's pod network, its bridge made by the test with a fixed
  MAC address (create_network), as netavark does itself from 1.9: otherwise a pod deletion can move
  it and cut the other pods off the host for a minute.
- PodDisruptionBudget, HorizontalPodAutoscaler: cluster controllers; not played.
- The static CPU manager policy (static_cpu_policy): a kubelet with it gives each Guaranteed pod
  with whole CPUs a cpuset of its own, and docs/deploy.md then says pin_workers = 1. podman 4.3
  cannot give a played pod a cpuset, so each unit replica becomes a Pod (named as podman names a
  Deployment's replicas) whose command first narrows its CPU affinity to its own CPUs, which is
  what the worker sees of a cpuset (os.sched_getaffinity), and the ConfigMap says pin_workers = 1.
- The model: the image carries the default (1.5B) model; the test's units serve the small one the
  whole suite runs (tests/tiers.py's SMALL_PROFILE, whose package the image also holds), named by a
  `default_profile` line added to the ConfigMap, so the faults, drains and answers take what they
  take on the other fleets.

Everything a run makes is named `jevk8s<pid>...`: a later run removes what a finished process left
(pods, volumes, the network, the secret), never a live run's.
"""
from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
import time
from pathlib import Path

import yaml

from deploy.image import podman_env
from shared.config import PROJECT_ROOT
from jevfleet.harness.netns import alive
from tests.tiers import SMALL_PROFILE

MANIFESTS = PROJECT_ROOT / "deploy" / "kubernetes"
PREFIX = "jevk8s"


def load_manifests(directory: Path = MANIFESTS) -> list[dict]:
    """Every document of the resources kustomization.yaml lists, in its order."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict] = []
    for resource in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((directory / resource).read_text()) if d]
    return docs


def find(docs: list[dict], kind: str, name: str = "") -> dict:
    """The one document of `kind` (named `name` when given)."""
    found = [d for d in docs if d["kind"] == kind and (not name or d["metadata"]["name"] == name)]
    if len(found) != 1:
        raise LookupError(f"{len(found)} {kind} documents named {name or 'anything'}")
    return found[0]


def containers(deployment: dict) -> list[dict]:
    return deployment["spec"]["template"]["spec"]["containers"]


def headless_service(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None")


def for_podman(docs: list[dict], deployment: str, *, tag: str, image: str, secret: str) -> str:
    """One Deployment and the ConfigMaps as podman 4.3 can play them (module docstring): renamed
    with `tag`, the image the test built, the secret the test made, no containerPorts."""
    out = [copy.deepcopy(d) for d in docs if d["kind"] == "ConfigMap"]
    for config_map in out:  # podman makes a named volume of each: tagged, so that remove() finds it
        config_map["metadata"]["name"] = f"{tag}-{config_map['metadata']['name']}"
    dep = copy.deepcopy(find(docs, "Deployment", deployment))
    dep["metadata"]["name"] = f"{tag}-{deployment}"
    for volume in dep["spec"]["template"]["spec"].get("volumes", []):
        if "configMap" in volume:
            volume["configMap"]["name"] = f"{tag}-{volume['configMap']['name']}"
    for c in containers(dep):
        c["image"] = image
        c.pop("ports", None)
        for env in c.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                ref["name"] = secret
    return yaml.safe_dump_all(out + [dep], sort_keys=False)


# The command's prefix that stands in for a cpuset: CPU affinity narrowed, then the pod's own command.
AFFINITY = ("import os, sys; os.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(',')]); "
            "os.execvp(sys.argv[2], sys.argv[2:])")


def split_cpus(available: list[int], units: int) -> list[list[int]]:
    """Disjoint CPU sets of equal size, one per unit, from the CPUs available: what a static-policy
    kubelet's exclusive cpusets come to on a node this size."""
    per = len(available) // units
    if per == 0:
        raise ValueError(f"{units} units cannot have CPUs of their own among {available}")
    return [available[i * per:(i + 1) * per] for i in range(units)]


def _pinned(doc: dict) -> dict:
    """A ConfigMap whose `pin_workers = 0` says 1, serving the small model."""
    for key, text in doc["data"].items():
        text, n = re.subn(r"(?m)^(\s*pin_workers\s*=\s*)0\b", r"\g<1>1", text)
        if n != 1 and key.endswith(".toml"):
            raise ValueError(f"ConfigMap {doc['metadata']['name']}: no single pin_workers = 0 in {key}")
        if key.endswith(".toml"):
            text += f'default_profile = "{SMALL_PROFILE}"\n'
        doc["data"][key] = text
    return doc


def pinned_config(played: str) -> str:
    """for_podman's YAML with every ConfigMap saying pin_workers = 1 and the small model. Every play
    of a run must say the same: podman keeps a ConfigMap as one named volume, and a later play's
    copy replaces it under pods that have not read it yet."""
    return yaml.safe_dump_all([_pinned(d) if d["kind"] == "ConfigMap" else d for d in yaml.safe_load_all(played)],
                              sort_keys=False)


def static_cpu_policy(played: str, deployment: str, cpusets: list[list[int]]) -> str:
    """for_podman's YAML as a static-policy kubelet runs it (module docstring): the Deployment
    named `deployment` becomes one Pod per cpuset, `<deployment>-pod-<i>`, whose containers run on
    those CPUs only, and every ConfigMap's `pin_workers = 0` becomes 1 (pinned_config)."""
    out = []
    for doc in yaml.safe_load_all(pinned_config(played)):
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == deployment:
            template = doc["spec"]["template"]
            for i, cpus in enumerate(cpusets):
                spec = copy.deepcopy(template["spec"])
                for c in spec["containers"]:
                    c["args"] = ["python", "-c", AFFINITY, ",".join(map(str, cpus)), *c["args"]]
                out.append({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {**copy.deepcopy(template["metadata"]), "name": f"{deployment}-pod-{i}"},
                            "spec": spec})
        else:
            out.append(doc)
    return yaml.safe_dump_all(out, sort_keys=False)


def podman_secret_json(secret: dict) -> str:
    """A Kubernetes Secret's data as podman 4.3's env references read it: {key: base64(value)}."""
    data = dict(secret.get("data", {}))
    data.update({k: base64.b64encode(v.encode()).decode() for k, v in secret.get("stringData", {}).items()})
    return json.dumps(data)


def podman(*args: str, check: bool = True, timeout: float = 300, stdin: str | None = None) -> str:
    proc = subprocess.run(["podman", *args], env=podman_env(), input=stdin, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-3000:]}")
    return proc.stdout


def create_network(name: str, subnet: str) -> str:
    """A podman network on `subnet` whose bridge keeps one MAC address from start to end; the bridge's
    name.

    A Linux bridge whose address nobody set takes the lowest address of its ports, so it changes when
    the pod holding that port is deleted (1 time in 4 with the test's four pods). The other pods keep
    the old address in their ARP cache for the host's side of the bridge and lose it, sending into
    nothing until the entry is probed out (60-100 s): the front's answers to the test's clients and
    its DNS queries to aardvark-dns. That was make test's Kubernetes failure of 2026-12-03 and
    2026-12-07, 4 clients timing out at once after the pod deletion. netavark pins the bridge's
    address itself from 1.9 on; Debian 12's 1.4 does not, and uses a bridge that already exists as
    it is. So the bridge is made here, before any pod, with a fixed address and the gateway's."""
    podman("network", "create", "--subnet", subnet, name)
    (info,) = json.loads(podman("network", "inspect", name))
    bridge, (net,) = info["network_interface"], info["subnets"]
    third = int(net["subnet"].split(".")[2])
    mac = f"02:6a:65:76:{third:02x}:01"  # locally administered
    prefix = net["subnet"].split("/")[1]
    for args in (["link", "add", bridge, "type", "bridge"], ["link", "set", bridge, "address", mac],
                 ["addr", "add", f"{net['gateway']}/{prefix}", "dev", bridge], ["link", "set", bridge, "up"]):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)
    return bridge


def bridge_mac(bridge: str) -> str:
    return Path(f"/sys/class/net/{bridge}/address").read_text().strip()


def pods(prefix: str) -> list[str]:
    """Names of the pods whose name starts with `prefix`."""
    out = podman("pod", "ps", "--format", "{{.Name}}", "--filter", f"name=^{prefix}", check=False)
    return [name for name in out.split() if name.startswith(prefix)]


def remove(tag: str) -> None:
    """Every pod, the network and the secrets of run `tag`; what is already gone is skipped."""
    for pod in pods(tag):
        podman("pod", "rm", "--force", "--time", "0", pod, check=False)
    for secret in podman("secret", "ls", "--format", "{{.Name}}", check=False).split():
        if secret.startswith(tag):
            podman("secret", "rm", secret, check=False)
    for volume in podman("volume", "ls", "--format", "{{.Name}}", check=False).split():
        if volume.startswith(tag):
            podman("volume", "rm", "--force", volume, check=False)
    inspected = podman("network", "inspect", "--format", "{{.NetworkInterface}}", tag, check=False).split()
    podman("network", "rm", "--force", tag, check=False)
    for bridge in inspected:  # netavark removes it with its last pod; not when no pod ever joined it
        subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)


def remove_leftovers() -> list[str]:
    """Remove what runs whose process is gone left behind; the tags removed."""
    names = (podman("pod", "ps", "--format", "{{.Name}}", check=False).split()
             + podman("network", "ls", "--format", "{{.Name}}", check=False).split()
             + podman("secret", "ls", "--format", "{{.Name}}", check=False).split()
             + podman("volume", "ls", "--format", "{{.Name}}", check=False).split())
    tags = {m.group(0) for n in names if (m := re.match(rf"{PREFIX}\d+", n))}
    gone = [t for t in tags if not alive(int(t[len(PREFIX):]))]
    for tag in gone:
        remove(tag)
    return gone


def pod_ip(pod: str, network: str) -> str:
    infra = podman("pod", "inspect", "--format", "{{.InfraContainerID}}", pod).strip()
    return podman("inspect", "--format", f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}',
                  infra).strip()


def delete_pod(pod: str, container: str, prestop: list[str], grace_s: int) -> tuple[subprocess.CompletedProcess, int]:
    """What the kubelet does when a pod is deleted: run the preStop command in the container, then
    SIGTERM (to PID 1) and SIGKILL when the grace period, counted from the start, is over; then the
    pod is removed. The preStop's result and the container's exit code, for the caller to check."""
    started = time.monotonic()
    hook = subprocess.run(["podman", "exec", container, *prestop], env=podman_env(),
                          capture_output=True, text=True, timeout=grace_s)
    left = max(1, round(grace_s - (time.monotonic() - started)))
    podman("pod", "stop", "--time", str(left), pod, timeout=left + 60)
    exit_code = int(podman("inspect", "--format", "{{.State.ExitCode}}", container).strip())
    podman("pod", "rm", pod)
    return hook, exit_code
