"""`ascendctl plan`: the memory budget of one device for a profile, before anything starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import typer

from ascendctl.profile_args import MODEL_HELP, PROFILE_HELP, SET_HELP, compat_warnings, load
from ascendctl.style import size, spaced
from engine.i18n import C_, N_, _

if TYPE_CHECKING:
    from rich.console import Console

    from engine.capacity import Plan


# A plan's verdict as a person reads it (--json keeps the value itself).
VERDICTS = {"ok": N_("ok"), "tight": N_("tight"), "does-not-fit": N_("does-not-fit")}


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _per_token_formula(p: "Plan") -> str:
    m = p.model
    layers = -(-m.full_attention_layers // p.pipeline_parallel_size)  # one pipeline stage's
    if m.mla_latent_dim:
        return _("{layers} layers × {latent} latent × {bytes} B").format(
            layers=layers, latent=m.mla_latent_dim, bytes=p.kv_dtype_bytes
        )
    return _("K,V × {layers} layers × {heads} heads × {head_dim} × {bytes} B").format(
        layers=layers, heads=p.kv_heads_per_device, head_dim=m.head_dim, bytes=p.kv_dtype_bytes
    )


def render_plan(p: "Plan", console: "Console") -> None:
    from rich.table import Table

    m = p.model
    if m.num_experts:
        kind = _("MoE {experts} experts, {active} active").format(experts=m.num_experts, active=m.experts_per_token)
    else:
        kind = _("dense")
    if m.hybrid:
        kind += _(", hybrid: {full} full + {linear} linear-attention layers").format(
            full=m.full_attention_layers, linear=m.linear_attention_layers
        )
    params = p.weights.parameters
    count = f"{params / 1e9:.2f} B" if params >= 1e9 else f"{params / 1e6:.2f} M"
    parallel = f"TP {p.tensor_parallel_size}"
    if p.pipeline_parallel_size > 1:
        parallel += f" x PP {p.pipeline_parallel_size}"
    if p.data_parallel_size > 1:
        parallel += f" x DP {p.data_parallel_size}"
    head = _("{profile}: {architecture} ({kind}), {dtype}, {count} parameters, {parallel}").format(
        profile=p.profile, architecture=m.architecture, kind=kind, dtype=m.dtype, count=count, parallel=parallel
    )
    console.print(f"[bold]plan[/] {head}", soft_wrap=True)
    console.print("[dim]" + _("model: {path}").format(path=p.model_dir) + "[/]", soft_wrap=True)

    budget = Table(title=_("Memory per device"), title_justify="left", box=None, pad_edge=False, show_header=False)
    budget.add_column(style="bold")
    budget.add_column(justify="right")
    budget.add_column(style="dim")
    if p.platform == "cpu" and p.kv_budget_exact:
        budget.add_row("KV cache", size(p.kv_bytes), _("VLLM_CPU_KVCACHE_SPACE (exact)"))
        budget.add_row(
            _("weights (host RAM)"),
            size(p.weights_per_device),
            _("exact, {files} safetensors file(s)").format(files=p.weights.files),
        )
    else:
        budget.add_row(
            _("device memory"), size(p.device_bytes), _("per device") if p.platform != "cpu" else _("host RAM")
        )
        budget.add_row(_("budget"), size(p.budget_bytes), f"× gpu_memory_utilization {p.utilization:.2f}")
        budget.add_row("− " + C_("memory", "weights"), size(p.weights_per_device), _weights_note(p))
        if p.platform != "cpu":
            budget.add_row("− " + _("activations"), size(p.activation_bytes), _("estimate: profiling pass + logits"))
            budget.add_row("− " + _("runtime"), size(p.reserve_bytes), _("estimate: collectives, workspaces"))
        budget.add_row("= KV cache", size(p.kv_bytes), "")
    console.print(budget)

    kv = Table(title="KV cache", title_justify="left", box=None, pad_edge=False, show_header=False)
    kv.add_column(style="bold")
    kv.add_column(justify="right")
    kv.add_column(style="dim")
    kv.add_row(_("per token"), size(p.kv_bytes_per_token), _per_token_formula(p))
    if m.hybrid:
        kv.add_row(
            _("state per sequence"),
            size(p.state_bytes_per_seq),
            _("{layers} linear-attention layers, any length").format(layers=m.linear_attention_layers),
        )
    kv.add_row(
        "block",
        _("{count} tokens").format(count=p.block_size),
        _("{size} per block").format(size=size(p.bytes_per_block)),
    )
    kv.add_row(_("blocks"), f"{p.num_blocks:,}", "")
    kv.add_row("tokens", f"{p.kv_tokens:,}", _("what vLLM logs as 'KV cache size'"))
    kv.add_row(
        _("max concurrency"),
        f"{p.max_concurrency:,.2f}×",
        _("requests of max_model_len {tokens} tokens").format(tokens=f"{p.max_model_len:,}"),
    )
    if p.offload_bytes:
        kv.add_row(
            _("DRAM tier"),
            size(p.offload_bytes),
            _("~{tokens} tokens of cold blocks").format(tokens=f"{p.offload_tokens:,}"),
        )
    console.print(kv)

    if len(p.tp_options) > 1:
        tps = Table(
            title=_("Tensor parallel options"), title_justify="left", box=None, pad_edge=False, header_style="bold"
        )
        for col in ("TP", _("fits"), _("KV tokens"), _("concurrency")):
            tps.add_column(col, justify="right")
        tps.add_column("")
        for o in p.tp_options:
            mark = "[green]" + _("yes") + "[/]" if o.fits else "[red]" + _("no") + "[/]"
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
    verdict = _(VERDICTS[p.verdict])
    console.print(f"\n[bold {colour}]" + _("verdict: {verdict}").format(verdict=verdict) + "[/]")
    for reason in p.reasons:
        console.print(f"  {reason}", markup=False, highlight=False, soft_wrap=True)
    hints = []
    if p.suggested_max_num_seqs is not None and p.suggested_max_num_seqs != p.max_num_seqs:
        hints.append(f"engine.max_num_seqs={p.suggested_max_num_seqs}")
    if p.suggested_tensor_parallel_size and p.suggested_tensor_parallel_size != p.tensor_parallel_size:
        hints.append(f"engine.tensor_parallel_size={p.suggested_tensor_parallel_size}")
    if hints:
        console.print(
            "  " + spaced(_("suggested:")) + " ".join(f"--set {h}" for h in hints),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for warning in p.warnings:
        console.print("  [yellow]" + spaced(_("warning:")) + "[/]" + escape(warning), highlight=False, soft_wrap=True)
    for note in p.notes:
        console.print("  [dim]" + spaced(_("note:")) + escape(note) + "[/]", soft_wrap=True)


def _weights_note(p: "Plan") -> str:
    total = _("exact: {size} in {files} file(s)").format(size=size(p.weights.total_bytes), files=p.weights.files)
    lay = p.layout
    if lay is not None and lay.expert_parallel_size != p.tensor_parallel_size * p.pipeline_parallel_size:
        return _("{total}; experts {size} / EP {ep}, the rest / TP {tp}").format(
            total=total, size=size(p.weights.expert_bytes), ep=lay.expert_parallel_size, tp=p.tensor_parallel_size
        ) + (f" x PP {lay.pipeline_parallel_size}" if lay.pipeline_parallel_size > 1 else "")
    if p.pipeline_parallel_size > 1:
        return f"{total} / TP {p.tensor_parallel_size} x PP {p.pipeline_parallel_size}"
    return f"{total} / TP {p.tensor_parallel_size}"


def render_layout(p: "Plan", console: "Console") -> None:
    from rich.table import Table

    lay = p.layout
    assert lay is not None
    table = Table(title=_("Layout over hosts"), title_justify="left", box=None, pad_edge=False, show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    table.add_row(
        _("hosts"),
        f"{lay.hosts} x {lay.devices_used_per_host}",
        _("mode {mode}; devices used per host, of {devices}").format(mode=lay.mode, devices=lay.devices_per_host),
    )
    split = f"TP {lay.tensor_parallel_size} x PP {lay.pipeline_parallel_size} x DP {lay.data_parallel_size}"
    table.add_row(
        C_("count", "ranks"), str(lay.tensor_parallel_size * lay.pipeline_parallel_size * lay.data_parallel_size), split
    )
    table.add_row(
        _("experts over"),
        _("{count} ranks").format(count=lay.expert_parallel_size),
        _("expert parallel: TP x PP x DP") if lay.expert_parallel else _("TP x PP (no expert parallel)"),
    )
    table.add_row(_("weights per host"), size(lay.weights_per_host), _("what each host reads at start-up"))
    table.add_row(_("KV cache per host"), size(lay.kv_per_host), "")
    table.add_row(_("KV tokens"), f"{lay.kv_tokens:,}", _("every replica together"))
    table.add_row(
        _("max concurrency"),
        f"{lay.max_concurrency:,.2f}×",
        _("requests of max_model_len {tokens}").format(tokens=f"{p.max_model_len:,}"),
    )
    table.add_row(
        _("weight load"),
        f"~{lay.expected_load_s:,.0f} s",
        _("estimate: weights per host at {rate} GiB/s").format(rate=f"{lay.load_gib_per_s:g}"),
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
