"""`ascendctl netcheck`: the multi-node network pre-flight, as verdicts with fixes."""

from __future__ import annotations

from typing import List, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command(
        "netcheck",
        help=(
            "Check the network for multi-node serving: hccn_tool on every NPU NIC (link, net health, address, "
            "gateway, detect address, LLDP, FEC, TLS, optical module, link flaps), /etc/hccn.conf, HCCL_IF_IP "
            "and the *_SOCKET_IFNAME variables against this host's interfaces, HCCL timeouts, and the peers "
            "given. Exit 0 when clean or warnings only, 1 on errors (--strict: on warnings too), 3 when "
            "nothing can be probed."
        ),
    )(netcheck)


def netcheck(
    root: Optional[str] = typer.Option(
        None, "--root", metavar="DIR", help="Check a machine recorded as a directory tree (as doctor --root)."
    ),
    nics: Optional[str] = typer.Option(
        None,
        "--nics",
        metavar="LIST",
        help="NPU NICs to check, e.g. 0-7 or 0-15 (default: those /etc/hccn.conf configures, else npu-smi's chips).",
    ),
    peer_npu: Optional[List[str]] = typer.Option(
        None,
        "--peer-npu",
        metavar="ADDR",
        help="An NPU NIC address of another node: every local NIC pings it with hccn_tool (repeatable).",
    ),
    peer: Optional[List[str]] = typer.Option(
        None,
        "--peer",
        metavar="HOST:PORT",
        help="A host port the nodes need (vLLM's data-parallel RPC port, Ray's 6379): TCP connect (repeatable).",
    ),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 on warnings too."),
) -> None:
    from ascendctl.checks_view import render_report
    from ascendctl.output import get_output
    from engine.i18n import _
    from engine.netcheck import parse_nics, run_netcheck

    out = get_output()
    with out.status(_("asking hccn_tool about every NPU NIC")):
        report = run_netcheck(
            root, nics=parse_nics(nics) if nics else None, peers_npu=peer_npu or (), peers_tcp=peer or ()
        )
    if not report.facts.get("npu", True) and not peer:
        from engine.errors import Unreachable

        raise Unreachable(
            _("no NPU on this host: nothing for netcheck to probe (no NPU NIC, no hccn_tool)"),
            _(
                "run it on an Ascend node, check a recorded one with --root DIR, or test host ports with --peer HOST:PORT"
            ),
        )
    out.emit(report.to_dict(), lambda c: render_report(c, report, strict, "netcheck"))
    code = report.exit_code(strict)
    if code:
        raise typer.Exit(code)
