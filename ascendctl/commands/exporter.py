"""`ascendctl exporter`: NPUs, engines and live diagnostics on one Prometheus endpoint; with
`dashboard` and `rules`, the Grafana dashboard and the alerting rules that go with it."""

from __future__ import annotations

import ipaddress
import signal
import threading
from pathlib import Path
from typing import List, Optional

import typer

DEFAULT_LISTEN = "127.0.0.1:9108"

HELP = (
    "Serve /metrics for Prometheus: every NPU under MindCluster npu-exporter's names (dcgm-exporter's on CUDA), "
    "each engine's vllm:* series with an `engine` label, and what only ascendctl knows (engine up / phase / time "
    "to ready / restarts / stall, planned vs actual KV blocks, active diagnostics, known-issue events, CANN error "
    "codes in the plogs, doctor checks, source health).\n\n"
    "Engines: the live runs `ascendctl serve` started, plus any URLs given. Collection runs in the background "
    "(devices and engines every 5 s, CANN plogs every 30 s, doctor every 300 s, each device view on its own: "
    "ECC every 120 s, links every 60 s...; --interval GROUP=SECONDS); a "
    "scrape never waits on npu-smi.\n\n"
    f"  ascendctl exporter                                serve on {DEFAULT_LISTEN}\n\n"
    "  ascendctl exporter dashboard > ascendctl.json     the Grafana dashboard\n\n"
    "  ascendctl exporter rules > ascendctl-rules.yml    the alerting rules\n\n"
    "Listens on 127.0.0.1 unless --listen says otherwise; TLS and basic auth come from --web-config, the "
    "exporter-toolkit file node_exporter reads."
)


def register(app: typer.Typer) -> None:
    app.command("exporter", help=HELP)(exporter)


def exporter(
    urls: Optional[List[str]] = typer.Argument(
        None, metavar="[dashboard | rules | URL...]", help="`dashboard`, `rules`, or vLLM server URLs to watch."
    ),
    listen: str = typer.Option(DEFAULT_LISTEN, "--listen", metavar="HOST:PORT", help="Address to serve on."),
    profile: Optional[str] = typer.Option(
        None, "--profile", help="Thresholds (diagnostics and rules) from this serving profile."
    ),
    thresholds_file: Optional[Path] = typer.Option(None, "--thresholds", help="YAML file overriding thresholds."),
    set_: Optional[List[str]] = typer.Option(
        None, "--set", help="Override one threshold, e.g. --set pending_requests=32."
    ),
    interval: Optional[List[str]] = typer.Option(
        None,
        "--interval",
        metavar="GROUP=SECONDS",
        help="Collection interval of devices, usages, engines, containers, plogs, doctor or a device view (ecc, common, link...).",
    ),
    web_config: Optional[Path] = typer.Option(
        None, "--web-config", metavar="FILE", help="TLS and basic auth (Prometheus exporter-toolkit format)."
    ),
    no_passthrough: bool = typer.Option(
        False, "--no-passthrough", help="Do not re-export the engines' vllm:* series (Prometheus scrapes them itself)."
    ),
    no_devices: bool = typer.Option(False, "--no-devices", help="Do not poll npu-smi / nvidia-smi."),
    no_doctor: bool = typer.Option(False, "--no-doctor", help="Do not run doctor's checks."),
    once: bool = typer.Option(False, "--once", help="Collect once, print the scrape on stdout and exit."),
) -> None:
    from ascendctl.dashboard import resolve_thresholds
    from engine.i18n import set_machine_output

    # A service read by Prometheus, Grafana and alerting: its endpoints and logs stay English.
    set_machine_output(True)
    words = list(urls or [])
    thresholds = resolve_thresholds(profile, thresholds_file, set_ or ())
    if words and words[0] in ("dashboard", "rules"):
        _artifact(words, thresholds)
        return
    _serve(words, listen, thresholds, interval or [], web_config, not no_passthrough, no_devices, no_doctor, once)


def _artifact(words: list[str], thresholds) -> None:
    import sys

    from engine.errors import BadInput

    if len(words) > 1:
        raise BadInput(f"`exporter {words[0]}` takes no URL", f"run `ascendctl exporter {words[0]}` alone")
    if words[0] == "dashboard":
        from engine.exporter.dashboard import dashboard_json

        sys.stdout.write(dashboard_json())
    else:
        from engine.exporter.alerts import rules_yaml

        sys.stdout.write(rules_yaml(thresholds))


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or :PORT (all addresses, said loudly). BadInput otherwise."""
    from engine.endpoints import split_host_port
    from engine.errors import BadInput

    fix = f"use --listen HOST:PORT, e.g. --listen {DEFAULT_LISTEN} or --listen [::1]:9108"
    split = split_host_port(text)
    if split is None:
        raise BadInput(f"--listen {text!r} is not HOST:PORT", fix)
    host, port = split
    if host and ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BadInput(f"--listen {text!r}: {host!r} is not an IPv6 address", fix) from None
    return host, port


def _intervals(items: list[str]) -> dict[str, float]:
    from engine.errors import BadInput
    from engine.exporter.collect import DEFAULT_INTERVALS

    out = {}
    for item in items:
        group, _, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if group not in DEFAULT_INTERVALS or not 0.5 <= seconds <= 86400:
            raise BadInput(
                f"--interval {item!r} is not GROUP=SECONDS",
                f"use one of {', '.join(DEFAULT_INTERVALS)} with 0.5 to 86400 seconds, e.g. --interval devices=10",
            )
        out[group] = seconds
    return out


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _serve(
    urls: list[str],
    listen: str,
    thresholds,
    interval_items: list[str],
    web_config: Path | None,
    passthrough: bool,
    no_devices: bool,
    no_doctor: bool,
    once: bool,
) -> None:
    from ascendctl import __version__
    from ascendctl.dashboard import default_devices
    from ascendctl.output import SCHEMA_VERSION, get_output
    from ascendctl.style import safe
    from engine.endpoints import normalize_base_url
    from engine.errors import BadInput
    from engine.exporter.alerts import rules_yaml
    from engine.exporter.collect import Exporter
    from engine.exporter.server import ExporterServer
    from engine.exporter.webconfig import load_web_config
    from engine.redact import url_without_credentials

    out = get_output()
    host, port = parse_listen(listen)
    intervals = _intervals(interval_items)
    web = load_web_config(web_config)
    engines = [normalize_base_url(u) for u in urls]
    exporter = Exporter(
        engines,
        devices=None if no_devices else default_devices(),
        thresholds=thresholds,
        intervals=intervals,
        passthrough=passthrough,
        doctor=not no_doctor,
    )
    if once:
        import sys

        from engine.exporter.server import Renderer

        try:
            body, _ = Renderer(cache=False).render(exporter.run_once())
            sys.stdout.write(body.decode())
        finally:
            exporter.close()
        return
    try:
        server = ExporterServer(
            exporter,
            host or "0.0.0.0",
            port,
            web,
            version=__version__,
            schema_version=SCHEMA_VERSION,
            dashboard=_dashboard_or_note,
            rules=lambda: rules_yaml(thresholds),
        )
    except OSError as exc:
        exporter.close()
        raise BadInput(
            f"cannot listen on {listen}: {exc.strerror or exc}",
            "pick a free port (--listen 127.0.0.1:9109), or stop what listens there (`ss -ltnp`)",
        ) from exc
    if not host or not _is_loopback(host):
        exposed = "every address" if not host else host
        guard = "TLS" if web.tls else "no TLS"
        guard += ", basic auth" if web.users else ", no authentication"
        out.warn(f"listening on {exposed} ({guard}): anyone who reaches port {port} reads this host's metrics")
    scheme = "https" if web.tls else "http"
    shown = f"[{host}]" if ":" in host else host or "0.0.0.0"
    out.info(f"ascendctl exporter on {scheme}://{shown}:{server.port}/metrics — Ctrl-C to stop")
    for u in engines:
        out.info(f"  engine {safe(url_without_credentials(u))}")
    stop = threading.Event()

    def _term(signum, frame):  # systemd stops with SIGTERM: leave as cleanly as on Ctrl-C
        stop.set()
        threading.Thread(target=server.httpd.shutdown, daemon=True).start()

    previous = signal.signal(signal.SIGTERM, _term)
    # The groups start beside the server: a first npu-smi that hangs must not hold up scrapes.
    threading.Thread(target=exporter.start, name="exporter-start", daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        out.info("stopping")
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.httpd.server_close()
        exporter.close()


def _dashboard_or_note() -> str:
    from engine.errors import AscendctlError
    from engine.exporter.dashboard import dashboard_json

    try:
        return dashboard_json()
    except AscendctlError as exc:
        import json

        return json.dumps({"error": exc.cause, "fix": exc.fix}) + "\n"
