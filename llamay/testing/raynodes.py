"""Losing a Ray node as a machine is lost: for the fleet's two-node tests and benchmark.

`Cluster.remove_node` kills the node's raylet, and its workers exit once they notice, which
can take a moment in which a replica still answers and writes files. A machine that is lost
does nothing more at all: `lose_node` stops the raylet and every process under it at once
(SIGSTOP), then kills them (SIGKILL), then tells the cluster the node is gone."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

__all__ = ["lose_node", "node_processes"]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # The command may hold spaces and parentheses: the parent pid follows the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d.name))
    return kids


def node_processes(node: Any) -> list[int]:
    """Pids of a `ray._private.node.Node`'s own processes and all their descendants."""
    roots = [info.process.pid for infos in node.all_processes.values() for info in infos if info.process]
    kids = _children()
    out: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def lose_node(cluster: Any, node: Any) -> list[int]:
    """Freeze and kill everything `node` runs, then remove it from `cluster`; the pids."""
    pids = node_processes(node)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    cluster.remove_node(node, allow_graceful=False)
    return pids
