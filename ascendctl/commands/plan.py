"""`ascendctl plan`: the memory budget of one device for a profile, before anything starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import typer

from ascendctl.profile_args import MODEL_HELP, PROFILE_HELP, SET_HELP, compat_warnings, load
from ascendctl.style import size

if TYPE_CHECKING:
    from rich.console import Console

    from engine.capacity import Plan


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _per_token_formula(p: "Plan") -> str:
    m = p.model
    layers = -(-m.full_attention_layers // p.pipeline_parallel_size)  # one pipeline stage's
    if m.mla_latent_dim:
        return f"{layers} layers × {m.mla_latent_dim} latent × {p.kv_dtype_bytes} B"
    return f"K,V × {layers} layers × {p.kv_heads_per_device} heads × {m.head_dim} × {p.kv_dtype_bytes} B"


def render_plan(p: "Plan", console: "Console") -> None:
    from rich.table import Table

    m = p.model
    kind = f"MoE {m.num_experts} experts, {m.experts_per_token} active" if m.num_experts else "dense"
    if m.hybrid:
        kind += f", hybrid: {m.full_attention_layers} full + {m.linear_attention_layers} linear-attention layers"
    params = p.weights.parameters
    count = f"{params / 1e9:.2f} B" if params >= 1e9 else f"{params / 1e6:.2f} M"
    parallel = f"TP {p.tensor_parallel_size}"
    if p.pipeline_parallel_size > 1:
        parallel += f" x PP {p.pipeline_parallel_size}"
    if p.data_parallel_size > 1:
        parallel += f" x DP {p.data_parallel_size}"
    console.print(
        f"[bold]plan[/] {p.profile}: {m.architecture} ({kind}), {m.dtype}, {count} parameters, {parallel}",
        soft_wrap=True,
    )
    console.print(f"[dim]model: {p.model_dir}[/]", soft_wrap=True)

    budget = Table(title="Memory per device", title_justify="left", box=None, pad_edge=False, show_header=False)
    budget.add_column(style="bold")
    budget.add_column(justify="right")
    budget.add_column(style="dim")
    if p.platform == "cpu" and p.kv_budget_exact:
        budget.add_row("KV cache", size(p.kv_bytes), "VLLM_CPU_KVCACHE_SPACE (exact)")
        budget.add_row(
            "weights (host RAM)", size(p.weights_per_device), f"exact, {p.weights.files} safetensors file(s)"
        )
    else:
        budget.add_row("device memory", size(p.device_bytes), "per device" if p.platform != "cpu" else "host RAM")
        budget.add_row("budget", size(p.budget_bytes), f"× gpu_memory_utilization {p.utilization:.2f}")
        budget.add_row("− weights", size(p.weights_per_device), _weights_note(p))
        if p.platform != "cpu":
            budget.add_row("− activations", size(p.activation_bytes), "estimate: profiling pass + logits")
            budget.add_row("− runtime", size(p.reserve_bytes), "estimate: collectives, workspaces")
        budget.add_row("= KV cache", size(p.kv_bytes), "")
    console.print(budget)

    kv = Table(title="KV cache", title_justify="left", box=None, pad_edge=False, show_header=False)
    kv.add_column(style="bold")
    kv.add_column(justify="right")
    kv.add_column(style="dim")
    kv.add_row("per token", size(p.kv_bytes_per_token), _per_token_formula(p))
    if m.hybrid:
        kv.add_row(
            "state per sequence",
            size(p.state_bytes_per_seq),
            f"{m.linear_attention_layers} linear-attention layers, any length",
        )
    kv.add_row("block", f"{p.block_size} tokens", f"{size(p.bytes_per_block)} per block")
    kv.add_row("blocks", f"{p.num_blocks:,}", "")
    kv.add_row("tokens", f"{p.kv_tokens:,}", "what vLLM logs as 'KV cache size'")
    kv.add_row("max concurrency", f"{p.max_concurrency:,.2f}×", f"requests of max_model_len {p.max_model_len:,} tokens")
    if p.offload_bytes:
        kv.add_row("DRAM tier", size(p.offload_bytes), f"~{p.offload_tokens:,} tokens of cold blocks")
    console.print(kv)

    if len(p.tp_options) > 1:
        tps = Table(
            title="Tensor parallel options", title_justify="left", box=None, pad_edge=False, header_style="bold"
        )
        for col in ("TP", "fits", "KV tokens", "concurrency"):
            tps.add_column(col, justify="right")
        tps.add_column("")
        for o in p.tp_options:
            mark = "[green]yes[/]" if o.fits else "[red]no[/]"
            here = " ← profile" if o.tensor_parallel_size == p.tensor_parallel_size else ""
            tps.add_row(
                str(o.tensor_parallel_size),
                mark,
                f"{o.kv_tokens:,}" if o.fits else "N/A",
                f"{o.max_concurrency:.2f}×" if o.fits else "N/A",
                (o.note + here).strip(),
            )
        console.print(tps)

    if p.layout is not None:
        render_layout(p, console)

    colour = {"ok": "green", "tight": "yellow", "does-not-fit": "red"}[p.verdict]
    console.print(f"\n[bold {colour}]verdict: {p.verdict}[/]")
    for reason in p.reasons:
        console.print(f"  {reason}", markup=False, highlight=False, soft_wrap=True)
    hints = []
    if p.suggested_max_num_seqs is not None and p.suggested_max_num_seqs != p.max_num_seqs:
        hints.append(f"engine.max_num_seqs={p.suggested_max_num_seqs}")
    if p.suggested_tensor_parallel_size and p.suggested_tensor_parallel_size != p.tensor_parallel_size:
        hints.append(f"engine.tensor_parallel_size={p.suggested_tensor_parallel_size}")
    if hints:
        console.print(
            "  suggested: " + " ".join(f"--set {h}" for h in hints), markup=False, highlight=False, soft_wrap=True
        )
    for warning in p.warnings:
        console.print(f"  [yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    for note in p.notes:
        console.print(f"  [dim]note: {note}[/]", soft_wrap=True)


def _weights_note(p: "Plan") -> str:
    total = f"exact: {size(p.weights.total_bytes)} in {p.weights.files} file(s)"
    lay = p.layout
    if lay is not None and lay.expert_parallel_size != p.tensor_parallel_size * p.pipeline_parallel_size:
        return (
            f"{total}; experts {size(p.weights.expert_bytes)} / EP {lay.expert_parallel_size}, "
            f"the rest / TP {p.tensor_parallel_size}"
            + (f" x PP {lay.pipeline_parallel_size}" if lay.pipeline_parallel_size > 1 else "")
        )
    if p.pipeline_parallel_size > 1:
        return f"{total} / TP {p.tensor_parallel_size} x PP {p.pipeline_parallel_size}"
    return f"{total} / TP {p.tensor_parallel_size}"


def render_layout(p: "Plan", console: "Console") -> None:
    from rich.table import Table

    lay = p.layout
    assert lay is not None
    table = Table(title="Layout over hosts", title_justify="left", box=None, pad_edge=False, show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    table.add_row(
        "hosts",
        f"{lay.hosts} x {lay.devices_used_per_host}",
        f"mode {lay.mode}; devices used per host, of {lay.devices_per_host}",
    )
    split = f"TP {lay.tensor_parallel_size} x PP {lay.pipeline_parallel_size} x DP {lay.data_parallel_size}"
    table.add_row("ranks", str(lay.tensor_parallel_size * lay.pipeline_parallel_size * lay.data_parallel_size), split)
    table.add_row(
        "experts over",
        f"{lay.expert_parallel_size} ranks",
        "expert parallel: TP x PP x DP" if lay.expert_parallel else "TP x PP (no expert parallel)",
    )
    table.add_row("weights per host", size(lay.weights_per_host), "what each host reads at start-up")
    table.add_row("KV cache per host", size(lay.kv_per_host), "")
    table.add_row("KV tokens", f"{lay.kv_tokens:,}", "every replica together")
    table.add_row("max concurrency", f"{lay.max_concurrency:,.2f}×", f"requests of max_model_len {p.max_model_len:,}")
    table.add_row(
        "weight load",
        f"~{lay.expected_load_s:,.0f} s",
        f"estimate: weights per host at {lay.load_gib_per_s:g} GiB/s",
    )
    table.add_row("HCCL_CONNECT_TIMEOUT", f"{lay.hccl_connect_timeout_s} s", lay.hccl_connect_timeout_from)
    console.print(table)


def _plan(
    profile: str = typer.Option(..., "--profile", "-p", help=PROFILE_HELP),
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    sets: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """Memory budget per device: exact weights, KV per token, blocks, tokens, concurrency, verdict.

    Reads only config.json and the safetensors headers: no tensor is loaded. Exit code 1 when the
    profile does not fit (the suggestion says what would).

    A profile with a `nodes` section is planned as the whole layout: weights per device under
    TP x PP x DP with expert parallel, what each host holds, and a warning when
    HCCL_CONNECT_TIMEOUT is shorter than a host's expected weight load.

    Precedence, lowest first: built-in defaults < the profile file < --model < each --set in order.
    """
    from ascendctl.output import get_output
    from engine.capacity import NO_FIT, plan

    out = get_output()
    resolved = load(profile, sets, model)
    for warning in compat_warnings(resolved):
        out.warn(warning)
    if resolved.nodes is not None and resolved.nodes.mode == "pd":
        _plan_roles(out, resolved)
        return
    result = plan(resolved)
    out.emit(result, lambda console: render_plan(result, console))
    if result.verdict == NO_FIT:
        raise typer.Exit(1)


def _plan_roles(out, resolved) -> None:
    """A pd layout: one plan per role's data-parallel group (prefill and decode need different
    memory), exit 1 when any of them does not fit."""
    from engine.capacity import NO_FIT, OK, TIGHT, plan
    from engine.profiles.parts import role_profiles

    plans = [(label, plan(derived)) for _, label, derived in role_profiles(resolved)]
    data = {
        "profile": resolved.name,
        "mode": "pd",
        "roles": [{"role": label.split(" ", 1)[0], "what": label, "plan": p} for label, p in plans],
        "verdict": next((v for v in (NO_FIT, TIGHT) if any(p.verdict == v for _, p in plans)), OK),
    }

    def render(console: "Console") -> None:
        for i, (label, p) in enumerate(plans):
            console.print(("\n" if i else "") + f"# {escape(label)}", style="bold")
            render_plan(p, console)

    out.emit(data, render)
    if data["verdict"] == NO_FIT:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("plan")(_plan)
