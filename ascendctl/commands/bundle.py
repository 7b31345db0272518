"""`ascendctl bundle`: one redacted archive for support, which doctor --root and triage read back."""

from __future__ import annotations

import re
from typing import Any, Optional

import typer

from ascendctl.style import ljust_cells, safe, size
from engine.i18n import N_, _

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
        out.warn(_("replacing the existing {archive}").format(archive=archive))
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
            _(
                "--no-redact: the archive KEEPS IP addresses, host names, user names and serial numbers "
                "(secrets are still masked); share it only with people who may see them"
            )
        )
    if with_device_logs:
        from engine.bundle.builder import DEVICE_LOG_TIMEOUT_FACTOR

        out.info(
            _(
                "--with-device-logs: msnpureport pulls every card's logs over the driver; this takes minutes "
                "(limit {seconds:g} s)"
            ).format(seconds=timeout * DEVICE_LOG_TIMEOUT_FACTOR)
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
    step = _("bundle: {step}")  # the progress line is for the person waiting: in their language
    with out.status(step.format(step=_("starting"))) as update, english():
        result = build_bundle(
            opts, host=host, live=live, env_known=env_known, progress=lambda name: update(step.format(step=name))
        )
    out.emit(result.summary(), lambda c: _render(c, result))


# A source's status as the table shows it (four columns wide); the manifest keeps the English word.
_MARKS = {
    "ok": (N_("ok"), ""),
    "failed": (N_("FAIL"), "red"),
    "skipped": (N_("skip"), "dim"),
    "cut": (N_("cut"), "yellow"),
}


def _why(text: str) -> str:
    """Why a source was skipped or cut, in the reader's language when it is one of the builder's
    fixed reasons (the manifest keeps the English); a tool's own words stay as they are."""
    missing = re.fullmatch(r"(\S+) not recorded", text)
    if missing:
        return _("{what} not recorded").format(what=missing.group(1))
    return _(text)


def _render(console: Any, result: Any) -> None:
    width = max(len(s.name) for s in result.sources)
    for s in result.sources:
        word, style = _MARKS.get(s.status, (s.status, ""))
        mark = safe(ljust_cells(_(word), 4))
        mark = f"[{style}]{mark}[/]" if style else mark
        why = f"  [dim]{safe(_why(s.why))}[/]" if s.why else ""
        console.print(f"  {mark} {safe(s.name):<{width}}  {size(s.bytes):>10}{why}", soft_wrap=True)
    summary = _("{archive}: {size} ({collected} collected) in {seconds:.1f} s").format(
        archive=f"[bold]{safe(str(result.archive))}[/]",
        size=size(result.bytes),
        collected=size(result.collected_bytes),
        seconds=result.duration_s,
    )
    console.print(summary, soft_wrap=True)
    if not result.redacted:  # said again under the table, where the user looks before sending the file
        console.print(
            _("{not_redacted}: the archive keeps IP addresses, host names, user names and serial numbers").format(
                not_redacted="[bold red]" + _("NOT redacted") + "[/]"
            ),
            soft_wrap=True,
        )
    if result.map_file:
        console.print(
            _("redacted; the mapping back to the real values stays here: {path} (do not send it)").format(
                path=safe(str(result.map_file))
            ),
            soft_wrap=True,
        )
