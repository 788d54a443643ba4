"""Network namespaces as hosts for black-box tests and the chaos run: create them, run commands
and threads inside them, and remove them, also when an earlier run crashed and left some behind.

Every namespace a test makes is named `<prefix><pid><host>`: a later run deletes those whose
creating process is gone, and never another live run's. Deleting a namespace takes its end of
each veth pair with it, and so the pair.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import threading
from typing import Callable, TypeVar

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30).stdout


def unavailable() -> str:
    """Why namespaces cannot be made here (no root, no `ip`), or "" when they can."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return ""


def alive(pid: int) -> bool:
    """Whether process `pid` exists: a run's leftovers are removed only once its process is gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def delete(ns: str) -> None:
    """Kill what still runs inside `ns` (only processes a test started there), then delete it."""
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def remove_leftovers(prefix: str) -> list[str]:
    """Delete namespaces named `<prefix><pid>...` whose creating test process is gone."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    gone = []
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(rf"{re.escape(prefix)}(\d+)\w*", name)
        if match and not alive(int(match.group(1))):
            delete(name)
            gone.append(name)
    return gone


def add(ns: str) -> None:
    sh("ip", "netns", "add", ns)
    sh("ip", "-n", ns, "link", "set", "lo", "up")


def exec_in(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


def enter(ns: str) -> None:
    """Move the calling thread (only it) into network namespace `ns`: its new sockets live there."""
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns} failed")
    finally:
        os.close(fd)


def run_in(ns: str, fn: Callable[[], T]) -> T:
    """fn() on a fresh thread inside `ns`; its result or its exception."""
    out: dict = {}

    def target() -> None:
        try:
            enter(ns)
            out["value"] = fn()
        except BaseException as exc:  # handed to the caller
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]
