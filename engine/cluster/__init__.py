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
from engine.i18n import _

ROOT_ENV = "ASCENDCTL_CLUSTER_ROOT"
# Joining the cluster: Ray's own client retries an unreachable head for ever (a warning every 5 s).
PROBE_TIMEOUT_S = 3.0
CONNECT_TIMEOUT_S = 30.0


def _probe(address: str, shown: str, fix: str) -> None:
    """A TCP connect to the head's GCS port (or the Ray Client port of `ray://`) first: a closed
    port or an unknown host is said at once, instead of Ray retrying it for ever. `auto` (the
    cluster `ray start` wrote down on this machine) is left to Ray, which answers at once."""
    import re
    import socket

    m = re.fullmatch(
        r"(?:[a-z][a-z0-9+.\-]*://)?(?:[^@/]*@)?(\[[^\]]+\]|[^:/\[\]]+)(?::(\d+))?/?", address.strip(), re.I
    )
    if address.strip() in ("auto", "local", "") or m is None:
        return
    host = m.group(1).strip("[]")
    port = int(m.group(2) or (10001 if address.startswith("ray://") else 6379))
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc) or type(exc).__name__)
        raise Unreachable(f"cannot reach the Ray cluster at {shown}: {why}", fix) from None


def _init_within(ray: Any, seconds: float, **kwargs: Any) -> None:
    """ray.init, given up after `seconds`: Ray's client blocks in its own code while it retries a
    head that accepts connections but never answers. It runs in a daemon thread, left behind when
    it does not return (the process ends soon after, with its error)."""
    import threading

    box: dict[str, BaseException] = {}

    def work() -> None:
        try:
            ray.init(**kwargs)
        except BaseException as exc:  # raised again in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=work, name="ascendctl-ray-init", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise TimeoutError
    if "error" in box:
        raise box["error"]


def node_report(drift: dict[str, Any] | None = None) -> dict[str, Any]:
    """Doctor's report of the node this runs on, with netcheck's under facts["netcheck"], and
    with `drift` (options: model_dir, full_hash) what `doctor --compare` compares under facts["drift"]."""
    from engine.doctor import run_doctor
    from engine.netcheck import run_netcheck

    root = os.environ.get(ROOT_ENV) or None
    report = run_doctor(root).to_dict()
    if drift is not None:
        from engine.doctor.drift import snapshot
        from engine.system.host import Host

        if root:
            from engine.system.recorded import recorded_host

            host, env_known = recorded_host(root)
        else:
            host, env_known = Host(), True
        report["facts"]["drift"] = snapshot(host, report, env_known=env_known, **drift)
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


def connect_ray(address: str | None = None) -> tuple[Any, bool]:
    """(the ray module, whether this call started the connection: the caller then shuts it down)
    for the cluster at `address` (default: RAY_ADDRESS, else the local one `ray start` joined).
    Raises Unreachable when Ray is missing or no cluster answers."""
    try:
        import ray
    except ImportError as exc:
        raise Unreachable(
            _("--cluster needs Ray, which is not installed"),
            _("pip install 'ascendctl[cluster]' (the same Ray version as the cluster's)"),
        ) from exc
    import logging

    from engine.redact import redact_value

    started_here = not ray.is_initialized()
    if started_here:
        target = address or os.environ.get("RAY_ADDRESS") or "auto"
        shown = redact_value(target)
        fix = (
            "check the address (`ray status` on the head node prints it) and that the head is up; or start one "
            "(`ray start --head` on the first node, `ray start --address=HEAD:6379` on the others)"
        )
        _probe(target, shown, fix)
        try:
            _init_within(
                ray,
                CONNECT_TIMEOUT_S,
                address=target,
                logging_level=logging.ERROR,
                log_to_driver=False,
                configure_logging=True,
            )
        except TimeoutError as exc:
            raise Unreachable(
                f"cannot reach the Ray cluster at {shown}: no answer within {CONNECT_TIMEOUT_S:g} s", fix
            ) from exc
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise Unreachable(f"no Ray cluster to join: {redact_value(first)}", fix) from exc
    return ray, started_here


def run_cluster(
    address: str | None = None, timeout: float = 300.0, drift: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One report per alive node of the Ray cluster at `address` (default: RAY_ADDRESS, else the
    local one `ray start` joined). Raises Unreachable when Ray is missing or no cluster answers."""
    ray, started_here = connect_ray(address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        task = ray.remote(num_cpus=0, max_retries=0)(node_report)
        refs = [
            task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False),
                name=f"ascendctl-doctor@{n.get('NodeManagerAddress', '?')}",
            ).remote(drift)
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
