"""`ascendctl bundle`: one redacted archive for support, which doctor --root and triage read back."""

from __future__ import annotations

import re
from typing import Any, Optional

import typer

from ascendctl.style import safe, size

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def register(app: typer.Typer) -> None:
    app.command(
        "bundle",
        help=(
            "Write one redacted .tar.gz for support: doctor, env, versions, pip freeze, npu-smi, version files, "
            "the newest serve run (profile, log tail, /metrics), CANN plogs in the time window and triage's report, "
            "with a manifest of what was collected, cut or failed; msnpureport's device logs with --with-device-logs. "
            "Laid out as MindCluster FaultDiag's collection where they overlap. IP addresses, host and user names are replaced "
            "consistently (the mapping is written beside the archive, FILE.map.json), secrets masked. The archive "
            "is a recorded machine: `doctor --root FILE` and `triage FILE` read it."
        ),
    )(bundle)


def _seconds(text: str) -> float:
    from engine.errors import BadInput

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text.lower())
    if not m:
        raise BadInput(f"--since {text!r} is not a duration", "use e.g. --since 30m, --since 2h, --since 1d")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def _bytes(text: str) -> int:
    from engine.errors import BadInput

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"--max-size {text!r} is not a size", "use e.g. --max-size 200M, --max-size 1G")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def bundle(
    since: str = typer.Option(
        "2h", "--since", metavar="AGE", help="CANN plogs modified within this age (30m, 2h, 1d)."
    ),
    run: Optional[str] = typer.Option(
        None, "--run", metavar="RUN", help="The serve run to include (run id or directory; default: the newest)."
    ),
    out_file: Optional[str] = typer.Option(
        None,
        "--out",
        "-o",
        metavar="FILE",
        help="Archive to write, a new name or an archive to replace; a folder gets the default name "
        "(default: ascendctl-bundle-DATE-TIME.tar.gz here).",
    ),
    no_redact: bool = typer.Option(
        False,
        "--no-redact",
        help="Keep IP addresses, host names, user names and serial numbers (secrets are masked anyway).",
    ),
    with_device_logs: bool = typer.Option(
        False,
        "--with-device-logs",
        help="Also run msnpureport (as root) and include every card's device logs. Slow: minutes on an 8-card host.",
    ),
    root: Optional[str] = typer.Option(
        None, "--root", metavar="DIR", help="Bundle a machine recorded as a directory tree instead of this one."
    ),
    max_size: str = typer.Option("200M", "--max-size", metavar="SIZE", help="Cap on what is collected (200M, 1G)."),
    timeout: float = typer.Option(
        10.0, "--timeout", min=0.1, metavar="SECONDS", help="Time limit of each command (npu-smi, pip) and collector."
    ),
    cluster: bool = typer.Option(
        False,
        "--cluster",
        help="Bundle every node of the cluster into one archive (a folder per node, one manifest with each node's "
        "clock offset, one redaction map): through the Ray cluster (RAY_ADDRESS, or a profile with nodes.mode ray), "
        "else over ssh to --hosts or the profile's nodes.addresses.",
    ),
    hosts: Optional[str] = typer.Option(
        None,
        "--hosts",
        metavar="FILE",
        help="With --cluster: reach these hosts over ssh, one per line: HOST or NAME HOST.",
    ),
    profile: Optional[str] = typer.Option(
        None,
        "--profile",
        "-p",
        metavar="PROFILE",
        help="With --cluster: the profile whose nodes section names the hosts.",
    ),
    node_timeout: float = typer.Option(
        300.0, "--node-timeout", min=1.0, metavar="S", help="With --cluster: time limit of one node's collection."
    ),
    remote_command: str = typer.Option(
        "ascendctl",
        "--remote-command",
        metavar="CMD",
        help="With --cluster over ssh: how ascendctl is started on the hosts (e.g. ~/venv/bin/ascendctl).",
    ),
    ssh_config: Optional[str] = typer.Option(
        None,
        "--ssh-config",
        metavar="FILE",
        help="With --cluster over ssh: ssh -F FILE (default: your own ssh config).",
    ),
) -> None:
    from pathlib import Path

    from ascendctl import __version__
    from ascendctl.output import get_output
    from engine.bundle.builder import BundleOptions, build_bundle, check_out, default_name, find_run
    from engine.system.host import Host

    out = get_output()
    if cluster:
        from ascendctl.cluster_bundle_view import bundle_cluster

        bundle_cluster(
            out,
            out_file,
            since=_seconds(since),
            max_bytes=_bytes(max_size),
            timeout=timeout,
            no_redact=no_redact,
            hosts=hosts,
            profile=profile,
            node_timeout=node_timeout,
            remote_command=remote_command,
            ssh_config=ssh_config,
            run=run,
        )
        return
    if hosts or profile:
        from engine.errors import BadInput

        raise BadInput("--hosts and --profile name the nodes of --cluster", "add --cluster, or leave them out")
    # Before any work: where the archive goes (never over a device, a FIFO or a folder) and the run.
    archive = check_out(Path(out_file or default_name()))
    if run is not None:
        find_run(run)
    if archive.exists():
        out.warn(f"replacing the existing {archive}")
    opts = BundleOptions(
        out=archive,
        since_s=_seconds(since),
        run=run,
        redact=not no_redact,
        max_bytes=_bytes(max_size),
        timeout_s=timeout,
        ascendctl_version=__version__,
        device_logs=with_device_logs,
    )
    if no_redact:
        # Loud on purpose, and on stderr so that --json stays data: the archive now identifies the site.
        out.warn(
            "--no-redact: the archive KEEPS IP addresses, host names, user names and serial numbers "
            "(secrets are still masked); share it only with people who may see them"
        )
    if with_device_logs:
        from engine.bundle.builder import DEVICE_LOG_TIMEOUT_FACTOR

        out.info(
            "--with-device-logs: msnpureport pulls every card's logs over the driver; this takes minutes "
            f"(limit {timeout * DEVICE_LOG_TIMEOUT_FACTOR:g} s)"
        )
    if root is not None:
        from engine.system.recorded import recorded_host

        host, env_known = recorded_host(root)
        live = False
    else:
        host, live, env_known = Host(), True, True
    from engine.i18n import english

    # The archive's reports (doctor.json, netcheck.json, the env report) are for support and for
    # `doctor --root`: English whatever the locale.
    with out.status("bundle: starting") as update, english():
        result = build_bundle(
            opts, host=host, live=live, env_known=env_known, progress=lambda name: update(f"bundle: {name}")
        )
    out.emit(result.summary(), lambda c: _render(c, result))


def _render(console: Any, result: Any) -> None:
    marks = {"ok": "ok", "failed": "[red]FAIL[/]", "skipped": "[dim]skip[/]", "cut": "[yellow]cut[/]"}
    width = max(len(s.name) for s in result.sources)
    for s in result.sources:
        why = f"  [dim]{safe(s.why)}[/]" if s.why else ""
        console.print(
            f"  {marks.get(s.status, s.status):<4} {safe(s.name):<{width}}  {size(s.bytes):>10}{why}", soft_wrap=True
        )
    console.print(
        f"[bold]{safe(str(result.archive))}[/]: {size(result.bytes)} ({size(result.collected_bytes)} collected) "
        f"in {result.duration_s:.1f} s",
        soft_wrap=True,
    )
    if not result.redacted:  # said again under the table, where the user looks before sending the file
        console.print(
            "[bold red]NOT redacted[/]: the archive keeps IP addresses, host names, user names and serial numbers",
            soft_wrap=True,
        )
    if result.map_file:
        console.print(
            f"redacted; the mapping back to the real values stays here: {safe(str(result.map_file))} (do not send it)",
            soft_wrap=True,
        )
