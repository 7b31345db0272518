"""`ascendctl doctor --cluster`: doctor and netcheck on every node of a Ray cluster.

    reports = run_cluster()            # one doctor report (dict) per alive node, netcheck inside
    compare_reports([(r["facts"]["host"], r) for r in reports])

One Ray task per alive node, pinned to it with NodeAffinitySchedulingStrategy (hard affinity: a
task never runs on another node in place of a dead one), asking for no CPU so it runs beside a
serving engine. Ray is an optional extra (`pip install 'ascendctl[cluster]'`) and is imported
only here. Every node must have ascendctl installed in the interpreter its Ray workers use.

A node whose Ray was started with ASCENDCTL_CLUSTER_ROOT set reports on that recorded machine
(a tree or an `ascendctl bundle` archive) instead of itself: how support replays a recorded fleet,
and how the tests run two nodes with different stacks on one machine.
"""

from __future__ import annotations

import os
from typing import Any

from engine.errors import Unreachable

ROOT_ENV = "ASCENDCTL_CLUSTER_ROOT"


def node_report() -> dict[str, Any]:
    """Doctor's report of the node this runs on, with netcheck's under facts["netcheck"]."""
    from engine.doctor import run_doctor
    from engine.netcheck import run_netcheck

    root = os.environ.get(ROOT_ENV) or None
    report = run_doctor(root).to_dict()
    try:
        net = run_netcheck(root).to_dict()
        report["facts"]["netcheck"] = {
            "verdict": net["verdict"],
            "headline": net["headline"],
            "nics": net["facts"]["nics"],
            "checks": net["checks"],
        }
    except Exception as exc:  # netcheck is an addition: doctor's report still counts
        report["facts"]["netcheck"] = {"error": f"{type(exc).__name__}: {exc}"}
    return report


def run_cluster(address: str | None = None, timeout: float = 300.0) -> list[dict[str, Any]]:
    """One report per alive node of the Ray cluster at `address` (default: RAY_ADDRESS, else the
    local one `ray start` joined). Raises Unreachable when Ray is missing or no cluster answers."""
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError as exc:
        raise Unreachable(
            "--cluster needs Ray, which is not installed",
            "pip install 'ascendctl[cluster]' (the same Ray version as the cluster's)",
        ) from exc
    import logging

    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(
                address=address or os.environ.get("RAY_ADDRESS") or "auto",
                logging_level=logging.ERROR,
                log_to_driver=False,
                configure_logging=True,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise Unreachable(
                f"no Ray cluster to join: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                "start one (`ray start --head` on the first node, `ray start --address=HEAD:6379` on the others) "
                "or set RAY_ADDRESS",
            ) from exc
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        task = ray.remote(num_cpus=0, max_retries=0)(node_report)
        refs = [
            task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False),
                name=f"ascendctl-doctor@{n.get('NodeManagerAddress', '?')}",
            ).remote()
            for n in nodes
        ]
        try:
            reports = ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError as exc:
            raise Unreachable(
                f"not every node answered within {timeout:g} s",
                "check `ray status`: a node that is alive but busy or unable to import ascendctl never answers",
            ) from exc
        except ray.exceptions.RayError as exc:
            raise Unreachable(
                f"a node's doctor failed: {str(exc).splitlines()[0]}",
                "install ascendctl in the interpreter of every node's Ray workers",
            ) from exc
        for node, report in zip(nodes, reports):
            report["facts"]["ray_node"] = {"id": node["NodeID"], "address": node.get("NodeManagerAddress")}
        return reports
    finally:
        if started_here:
            ray.shutdown()
