"""`ascendctl bundle --cluster`: the shell around engine.cluster.bundle (which nodes, how they are
reached, the per-node table)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascendctl.style import plain


def bundle_cluster(
    out: Any,
    out_file: str | None,
    *,
    since: float | None,
    max_bytes: int,
    timeout: float,
    no_redact: bool,
    hosts: str | None,
    profile: str | None,
    node_timeout: float,
    remote_command: str,
    ssh_config: str | None,
    run: str | None,
) -> None:
    import time

    from ascendctl import __version__
    from engine.bundle.builder import check_out, default_name
    from engine.cluster.bundle import ClusterOptions, collect_ray, collect_ssh, read_hosts, write_cluster_archive
    from engine.errors import ProblemsFound

    archive = check_out(Path(out_file or default_name().replace("bundle", "cluster-bundle", 1)))
    targets: list[tuple[str, str]] | None = None
    mode = "ray"
    prof_name = None
    if hosts:
        targets, mode = read_hosts(hosts), "ssh"
    if profile:
        from ascendctl.profile_args import load

        prof = load(profile, None, None)
        prof_name = prof.name
        nodes = prof.nodes
        if nodes is not None and nodes.mode != "ray" and targets is None:
            if not nodes.addresses:
                from engine.errors import BadInput

                raise BadInput(
                    f"profile {prof.name}: nodes.addresses is empty, so there is no host to reach",
                    "set nodes.addresses, or give --hosts FILE",
                )
            targets, mode = [(f"node{k}", a) for k, a in enumerate(nodes.addresses)], "ssh"
    address = None
    if profile and targets is None and prof.nodes is not None and prof.nodes.addresses:
        import os

        if not os.environ.get("RAY_ADDRESS"):  # the profile's Ray head, unless the environment names one
            address = f"{prof.nodes.addresses[0]}:{prof.nodes.ray_port}"
    opts = ClusterOptions(
        out=archive,
        since_s=since,
        max_bytes=max_bytes,
        timeout_s=timeout,
        node_timeout_s=node_timeout,
        redact=not no_redact,
        profile=prof_name,
        run=run,
        ascendctl_version=__version__,
        remote_command=remote_command,
        ssh_config=ssh_config,
    )
    if no_redact:
        out.warn("--no-redact: the archive KEEPS IP addresses, host names, user names and serial numbers of every node")
    started = time.perf_counter()
    with out.status(f"bundle --cluster: collecting over {mode}"):
        results = collect_ssh(targets, opts) if targets is not None else collect_ray(opts, address)
    result = write_cluster_archive(results, opts, started)
    out.emit(result.summary(), lambda c: _render(c, result))
    bad = [n for n in result.nodes if n["status"] != "ok"]
    if bad:
        raise ProblemsFound(
            f"{len(bad)} of {len(result.nodes)} node(s) not collected: "
            + "; ".join(f"{n['name']} {n['status']} ({n['reason']})" for n in bad[:3]),
            "the archive holds every node that answered; check the others' ssh / Ray reachability and collect them again",
        )


def _render(console: Any, result: Any) -> None:
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    for col in ("node", "status", "reached", "clock offset", "time", "reason"):
        table.add_column(col)
    for n in result.nodes:
        off = n["clock_offset_s"]
        err = n["clock_offset_error_s"]
        table.add_row(
            plain(n["name"]),
            plain(n["status"], style="green" if n["status"] == "ok" else "red"),
            plain(n["reached"]),
            plain("N/A" if off is None else f"{off:+.3f} s (+/- {err:.3f})"),
            plain(f"{n['duration_s']:.1f} s"),
            plain(n["reason"] or ""),
        )
    console.print(table)
    console.print(
        f"{result.archive}: {result.bytes / 1024:.1f} KiB, {len(result.nodes)} nodes in {result.duration_s:.1f} s"
    )
    if result.map_file:
        console.print(
            f"redacted with one map for every node; the mapping back stays here: {result.map_file} (do not send it)"
        )
