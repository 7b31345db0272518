"""`ascendctl demo`: build a tiny model once, serve it on the CPU engine, send a few requests,
then watch it (the `top` dashboard on a terminal, else live status lines)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import typer

from engine import i18n

if TYPE_CHECKING:
    from ascendctl.output import Output
    from engine.demo.chat import Exchange
    from engine.launcher import Supervisor

PROFILE = "cpu-tiny"


def register(app: typer.Typer) -> None:
    app.command(
        "demo",
        help=(
            "No NPU needed: build a tiny random-weight Qwen3 model into the cache (once), serve it "
            f"with the `{PROFILE}` profile on the CPU engine, send a few chat and completion "
            "requests, then open the dashboard on it, with a light, varied background load (the "
            "bench client) so that its charts move; --no-load turns it off. Ctrl-C stops the engine. With "
            "--batch (or --json) it exits after the requests, for scripts and CI."
        ),
    )(demo)


def demo(
    requests: int = typer.Option(4, "--requests", min=0, help="How many requests to send once the engine is ready."),
    no_top: bool = typer.Option(False, "--no-top", help="Print live status lines instead of opening the dashboard."),
    batch: bool = typer.Option(
        False, "--batch", help="Exit after the requests (stopping the engine): for scripts and CI."
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="Serve this model directory instead of building the tiny one."
    ),
    port: Optional[int] = typer.Option(
        None,
        "--port",
        min=1,
        max=65535,
        help="Port to serve on (default: the profile's, or a free one when it is taken).",
    ),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between live status lines."),
    no_load: bool = typer.Option(
        False,
        "--no-load",
        help="Send no background load while the dashboard is open (by default about 0.6 requests/s with "
        "a small burst now and then; live status lines never have one).",
    ),
) -> None:
    from ascendctl.launch_view import LaunchView, preflight, show_diagnosis
    from ascendctl.output import SCHEMA_VERSION, get_output
    from ascendctl.profile_args import resolve
    from engine.launcher import port_is_free, prepare_run

    out = get_output()
    batch = batch or out.json_mode
    if model is None:
        from ascendctl.launch_view import ensure_demo_model

        model = str(ensure_demo_model(out))

    sets = [f"server.port={port}"] if port else []
    prof, spec, _ = resolve(PROFILE, model, sets)
    if port is None and not port_is_free(spec.host, spec.port):
        free = _free_port(spec.host)
        out.info(i18n._("port {port} is taken; the demo uses {free} instead").format(port=spec.port, free=free))
        prof, spec, _ = resolve(PROFILE, model, [f"server.port={free}"])
    preflight(out, prof, spec, port_option="--port ")

    view = LaunchView(out, echo=False)
    sup = prepare_run(prof, spec, listener=view, ready_timeout=900.0)
    run_dir = sup.run_dir
    view.begin(run_dir, spec.url)
    exchanges: list[Exchange] = []
    code = 0
    with sup.forwarding_signals():
        try:
            sup.start()
            if not sup.wait_ready():
                code = _not_ready(out, sup)
            else:
                exchanges, code = _talk(out, sup, prof.model.served_name, requests, spec.env.get("VLLM_API_KEY"))
                if code == 0 and not batch and not sup.stopping:
                    code = _watch(out, sup, no_top, interval, None if no_load else prof.model.served_name)
        finally:
            view.end()
            sup.shutdown()
    if code == 0 and sup.stopping and not batch:
        code = 130
    if out.json_mode:
        from ascendctl.output import to_jsonable

        out.json_line(
            {
                "schema_version": SCHEMA_VERSION,
                "event": "end",
                "run_dir": str(run_dir),
                "url": spec.url,
                "exchanges": to_jsonable(exchanges),
                "exit_code": code,
            }
        )
    elif code in (0, 130):
        out.info(i18n._("demo over; the engine is stopped. Its log: {log}").format(log=run_dir / "engine.log"))
    if code == 1:
        show_diagnosis(out, sup.outcome())
    raise typer.Exit(code)


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _not_ready(out: Output, sup: Supervisor) -> int:
    if sup.stopping:
        return 130
    return 1


def _talk(out: Output, sup: Supervisor, model_name: str, count: int, api_key: str | None) -> tuple[list[Exchange], int]:
    """Send the requests and print them. Exit code 1 when the engine died under them."""
    from engine.demo.chat import demo_requests
    from engine.errors import Unreachable

    exchanges: list[Exchange] = []
    if count and not out.json_mode:
        from ascendctl.style import safe

        head = i18n._("{count} requests to {url}").format(count=count, url=safe(sup.url))
        out.console.print(f"\n[bold]{head}[/] " + i18n._("(random weights: the words are noise, the serving is real)"))
    try:
        for ex in demo_requests(sup.url, model_name, count, api_key):
            exchanges.append(ex)
            _show_exchange(out, ex)
            if sup.stopping:
                break
    except Unreachable:
        if sup.wait_exit(5) is not None:
            return exchanges, 1  # the engine died: the diagnosis says why
        raise
    return exchanges, 0


def _show_exchange(out: Output, ex: Exchange) -> None:
    from ascendctl.style import num, safe

    if out.json_mode:
        return
    # The model's words are untrusted text (random weights write any token): no markup, no controls.
    text = safe(ex.text.strip().replace("\n", " ")[:160])
    out.console.print(f"[cyan]{ex.kind:>10}[/] {safe(ex.prompt)}", soft_wrap=True)
    out.console.print(
        f"{'':>10} [dim]{text}[/]  "
        + i18n._("({prompt} → {completion} tokens, {seconds} s)").format(
            prompt=num(ex.prompt_tokens), completion=num(ex.completion_tokens), seconds=f"{ex.seconds:.2f}"
        ),
        soft_wrap=True,
    )


def _watch(out: Output, sup: Supervisor, no_top: bool, interval: float, load_model: str | None) -> int:
    """The dashboard when a person watches a terminal, else a status line per interval. Either
    way until Ctrl-C (or quitting the dashboard). `load_model`: the served model's name to keep a
    background load on while the dashboard is open; None for none. Status lines never have one:
    they are for scripts and logs, where nobody watches charts."""
    import sys

    if no_top or not (out.interactive and sys.stdout.isatty()):
        out.info(
            i18n._("live status from {url}/metrics every {seconds:g} s; Ctrl-C stops the engine").format(
                url=sup.url, seconds=interval
            )
        )
        return _status_lines(out, sup, interval)
    if load_model is not None:
        out.info(i18n._("a light background load runs while the dashboard is open (--no-load turns it off)"))
    _dashboard(sup, load_model)
    # An engine that ended while nobody asked it to has failed, whatever its own exit code: vLLM's
    # API server exits 0 when its EngineCore dies.
    return 1 if sup.poll() is not None and not sup.stopping else 0


def _dashboard(sup: Supervisor, load_model: str | None) -> None:
    """The dashboard on the demo's engine until the user quits it, with the background load
    running meanwhile; the load is stopped (its thread joined) before this returns."""
    import contextlib
    import threading

    from ascendctl.dashboard import run_dashboard
    from engine.demo.load import BackgroundLoad

    closed = threading.Event()
    threading.Thread(target=_stop_under_dashboard, args=(sup, closed), daemon=True).start()
    load = BackgroundLoad(sup.url, load_model) if load_model is not None else contextlib.nullcontext()
    try:
        with load:
            # a SIGTERM (or SIGHUP) closes it as `q` does: the terminal is given back at once
            run_dashboard([sup.url], quit_when=lambda: sup.stopping)
    finally:
        closed.set()


def _stop_under_dashboard(sup: Supervisor, closed) -> None:
    """A SIGTERM while the dashboard owns the terminal: stop the engine's process group at once
    (no orphan may outlive us), while the dashboard quits on its own (`quit_when`)."""
    while not closed.is_set():
        if sup.wait_for_stop(0.5):
            sup.stop(sup.stop_signal)
            return


def _status_lines(out: Output, sup: Supervisor, interval: float) -> int:
    from ascendctl.style import num
    from engine.errors import AscendctlError
    from engine.metrics.prom import scrape

    previous = None
    while not sup.stopping:
        if sup.poll() is not None:
            return 1
        try:
            m = scrape(sup.url)
        except AscendctlError as exc:
            out.warn(exc.cause)
        else:
            rate = "N/A"
            if previous is not None and m.generation_tokens is not None and previous.generation_tokens is not None:
                rate = f"{(m.generation_tokens - previous.generation_tokens) / interval:.1f}"
            kv_pct = None if m.kv_usage is None else m.kv_usage * 100
            kv = num(kv_pct, "{:.1f}") + "%"  # pre-formatted: a percent sign in a message reads as printf
            out.console.print(
                i18n._(
                    "running {running}  waiting {waiting}  KV cache {kv}  generated {tokens} tokens ({rate} tok/s)  "
                    "requests ok {ok}"
                ).format(
                    running=num(m.running),
                    waiting=num(m.waiting),
                    kv=kv,
                    tokens=num(m.generation_tokens),
                    rate=rate,
                    ok=num(m.requests_ok),
                ),
                highlight=False,
            )
            previous = m
        sup.wait_for_stop(interval)
    return 0
