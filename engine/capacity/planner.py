"""`plan(profile, model_dir)`: the memory budget of one device before anything starts.

Exact: weights (safetensors headers), KV bytes per token and per block (config.json + vLLM's
layout rules), blocks, tokens and concurrency for a given KV budget. On the CPU engine with an
explicit VLLM_CPU_KVCACHE_SPACE the budget itself is exact too. On devices the budget subtracts
an activation and runtime estimate (vLLM measures those at start-up); the plan says which figures
are estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.capacity.kv import Capacity, KVLayout, capacity, cdiv, layout
from engine.capacity.model_config import ModelShape, read_config
from engine.capacity.safetensors import Weights, weights
from engine.data import load_yaml
from engine.dtypes import canonical_dtype
from engine.errors import BadInput
from engine.i18n import _
from engine.profiles.multinode import data_parallel_size
from engine.profiles.schema import Profile

GIB = 2**30
OK, TIGHT, NO_FIT = "ok", "tight", "does-not-fit"


def platform_defaults() -> dict[str, Any]:
    return load_yaml("engine.capacity", "defaults.yaml")


@dataclass(frozen=True)
class TPOption:
    tensor_parallel_size: int
    fits: bool
    kv_tokens: int
    max_concurrency: float
    note: str = ""


@dataclass(frozen=True)
class Layout:
    """A profile's `nodes` layout as the plan sees it: how the model spreads over the hosts, what
    each host holds, and how long its start-up should take against HCCL's connect timeout."""

    hosts: int
    mode: str
    devices_per_host: int
    devices_used_per_host: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    expert_parallel: bool
    expert_parallel_size: int  # ranks the routed experts are split over (TP x PP without EP)
    weights_per_host: int
    kv_per_host: int
    kv_tokens: int  # over the whole layout: every replica's
    max_concurrency: float  # requests of max_model_len over the whole layout
    load_gib_per_s: float
    expected_load_s: float
    hccl_connect_timeout_s: int
    hccl_connect_timeout_from: str


@dataclass(frozen=True)
class Plan:
    profile: str
    platform: str
    model_dir: str
    model: ModelShape
    weights: Weights
    tensor_parallel_size: int
    kv_cache_dtype: str
    # The budget of ONE device (one rank), in bytes.
    device_bytes: int | None
    utilization: float | None
    budget_bytes: int
    weights_per_device: int
    activation_bytes: int
    reserve_bytes: int
    kv_bytes: int
    kv_budget_exact: bool
    # The KV cache.
    block_size: int
    kv_heads_per_device: int
    kv_dtype_bytes: int
    kv_bytes_per_token: int
    state_bytes_per_seq: int
    bytes_per_block: int
    num_blocks: int
    kv_tokens: int
    max_model_len: int
    max_concurrency: float
    max_num_seqs: int
    # Host DRAM tier (--kv-offloading-size): cold blocks, per device.
    offload_bytes: int
    offload_tokens: int
    verdict: str
    reasons: list[str] = field(default_factory=list)
    suggested_max_num_seqs: int | None = None
    suggested_tensor_parallel_size: int | None = None
    tp_options: list[TPOption] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    layout: Layout | None = None
    # What does not change the verdict but needs the operator's eye (a short HCCL timeout).
    warnings: list[str] = field(default_factory=list)


def _kv_dtype(profile: Profile, shape: ModelShape) -> str:
    if profile.engine.kv_cache_dtype not in ("auto", ""):
        return profile.engine.kv_cache_dtype
    return _model_dtype(profile, shape)


def _model_dtype(profile: Profile, shape: ModelShape) -> str:
    dtype = canonical_dtype(profile.engine.dtype)
    if dtype in ("auto", "", None):
        return shape.dtype
    return dtype


def _tp_allowed(shape: ModelShape, tp: int) -> str:
    """Why vLLM would refuse this TP degree for this model ('' when it accepts it)."""
    if shape.num_attention_heads % tp:
        return _("{heads} attention heads do not split over {tp} ranks").format(heads=shape.num_attention_heads, tp=tp)
    if shape.num_kv_heads % tp and tp % shape.num_kv_heads:
        return _("{heads} KV heads neither split over nor replicate onto {tp} ranks").format(
            heads=shape.num_kv_heads, tp=tp
        )
    lin = shape.linear
    if lin and (lin.num_key_heads % tp or lin.num_value_heads % tp):
        return _("linear-attention heads ({key}/{value}) do not split over {tp} ranks").format(
            key=lin.num_key_heads, value=lin.num_value_heads, tp=tp
        )
    return ""


@dataclass(frozen=True)
class _Budget:
    device_bytes: int | None
    utilization: float | None
    budget: int
    weights: int
    activation: int
    reserve: int
    kv: int
    exact: bool


def _activation_estimate(profile: Profile, shape: ModelShape, tp: int, defaults: dict[str, Any]) -> int:
    """Peak of vLLM's profiling forward pass: one batch of max_num_batched_tokens, plus logits."""
    tokens = profile.engine.max_num_batched_tokens or defaults["max_num_batched_tokens_per_rank"]
    seqs = profile.engine.max_num_seqs or defaults["max_num_seqs_per_rank"]
    ffn = shape.intermediate_size
    if shape.num_experts and shape.experts_per_token:
        ffn = max(ffn, 0)  # routed experts run one at a time; the dense width bounds the peak
    act_bytes = 2
    hidden_states = tokens * (4 * shape.hidden_size + 2 * (ffn // tp)) * act_bytes
    logits = min(seqs, tokens) * shape.vocab_size * 4  # fp32 logits of the sampler warm-up
    return hidden_states + logits


def _pp(profile: Profile) -> int:
    return profile.engine.pipeline_parallel_size or 1


def _ep_size(profile: Profile, tp: int) -> int:
    """Ranks the routed experts are split over: TP x PP, times DP with expert parallel on."""
    dp = data_parallel_size(profile)
    return tp * _pp(profile) * (dp if profile.engine.enable_expert_parallel else 1)


def weights_per_device(profile: Profile, w: Weights, tp: int) -> int:
    """Weight bytes on one device: everything split over TP x PP ranks; with expert parallel and
    several DP replicas, the routed experts over TP x PP x DP instead (each replica holds its
    own copy of the rest)."""
    ranks = tp * _pp(profile)
    ep = _ep_size(profile, tp)
    if ep == ranks:
        return math.ceil(w.total_bytes / ranks)
    return math.ceil((w.total_bytes - w.expert_bytes) / ranks) + math.ceil(w.expert_bytes / ep)


def _stage(shape: ModelShape, pp: int) -> ModelShape:
    """The layers one pipeline stage holds (an even split, rounded up)."""
    if pp == 1:
        return shape
    return replace(
        shape,
        num_layers=cdiv(shape.num_layers, pp),
        full_attention_layers=cdiv(shape.full_attention_layers, pp),
        linear_attention_layers=cdiv(shape.linear_attention_layers, pp),
    )


def _budget(profile: Profile, shape: ModelShape, w: Weights, tp: int) -> _Budget:
    platform = profile.platform
    defaults = platform_defaults()[platform]
    weights_rank = weights_per_device(profile, w, tp)
    explicit = profile.engine.kv_cache_memory_bytes
    if platform == "cpu":
        if explicit:
            return _Budget(None, None, explicit, weights_rank, 0, 0, explicit, True)
        space = profile.engine.cpu_kvcache_space_gib or _int_or_none(profile.env.get("VLLM_CPU_KVCACHE_SPACE"))
        if space:
            kv = space * GIB
            return _Budget(None, None, kv, weights_rank, 0, 0, kv, True)
        import psutil

        total = psutil.virtual_memory().total
        util = profile.engine.gpu_memory_utilization or defaults["gpu_memory_utilization"]
        budget = math.ceil(total * util)
        return _Budget(total, util, budget, weights_rank, 0, 0, budget - weights_rank, False)
    device = int((profile.device.hbm_gib or 0) * GIB)
    util = profile.engine.gpu_memory_utilization or defaults["gpu_memory_utilization"]
    budget = math.ceil(device * util)
    activation = _activation_estimate(profile, shape, tp, defaults)
    reserve = int(defaults["runtime_reserve_gib"] * GIB)
    if explicit:  # vLLM sizes the KV cache to exactly this and skips the memory share
        return _Budget(device, util, budget, weights_rank, activation, reserve, explicit, True)
    return _Budget(
        device, util, budget, weights_rank, activation, reserve, budget - weights_rank - activation - reserve, False
    )


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _fit(profile: Profile, shape: ModelShape, w: Weights, tp: int, max_len: int) -> tuple[_Budget, KVLayout, Capacity]:
    defaults = platform_defaults()[profile.platform]
    block = profile.engine.block_size or defaults["block_size"]
    kv = layout(
        _stage(shape, _pp(profile)),
        tp,
        block,
        _kv_dtype(profile, shape),
        defaults["hybrid_block_align"],
        _model_dtype(profile, shape),
    )
    budget = _budget(profile, shape, w, tp)
    return budget, kv, capacity(kv, budget.kv, max_len)


def plan(profile: Profile, model_dir: str | Path | None = None) -> Plan:
    """Plan `profile` for the model in `model_dir` (default: the profile's model.path)."""
    directory = Path(model_dir if model_dir is not None else profile.model.path).expanduser()
    if not directory.is_dir():
        raise BadInput(
            _("model directory not found: {path}").format(path=directory),
            _("download the model there, or give its directory: ascendctl plan --profile {name} --model DIR").format(
                name=profile.name
            ),
        )
    shape = read_config(directory)
    w = weights(directory)
    defaults = platform_defaults()[profile.platform]
    tp = profile.engine.tensor_parallel_size
    max_len = profile.engine.max_model_len or shape.max_position_embeddings
    if not max_len:
        raise BadInput(
            f"{directory}/config.json has no max_position_embeddings and the profile sets no max_model_len",
            "set engine.max_model_len in the profile (or --set engine.max_model_len=N)",
        )
    max_seqs = profile.engine.max_num_seqs or defaults["max_num_seqs_per_rank"] * (
        tp if profile.platform == "cpu" else 1
    )

    reasons: list[str] = []
    if shape.max_position_embeddings and max_len > shape.max_position_embeddings:
        # vLLM refuses to start in this case, after loading for a while: say it before launch.
        reasons.append(
            _(
                "max_model_len {length} exceeds the model's max_position_embeddings {limit}: the engine refuses to start"
            ).format(length=f"{max_len:,}", limit=f"{shape.max_position_embeddings:,}")
        )
    refused = _tp_allowed(shape, tp)
    if refused:
        reasons.append(f"TP {tp}: {refused}")
    budget, kv, cap = _fit(profile, shape, w, tp, max_len)
    need = kv.blocks_per_request(max_len)
    if budget.kv <= 0:
        reasons.append(
            _(
                "no room for a KV cache: weights {weights} + activations {activations} + runtime {runtime} per device "
                "exceed the {budget} budget"
            ).format(
                weights=_gib(budget.weights),
                activations=_gib(budget.activation),
                runtime=_gib(budget.reserve),
                budget=_gib(budget.budget),
            )
        )
    elif cap.num_blocks < need:
        reasons.append(
            _("the KV cache holds {tokens} tokens, less than one request of max_model_len {length}").format(
                tokens=f"{cap.kv_tokens:,}", length=f"{max_len:,}"
            )
        )
    if reasons:
        verdict = NO_FIT
    elif cap.max_concurrency < max_seqs:
        verdict = TIGHT
        reasons.append(
            _(
                "only {count:.2f} requests of {length} tokens fit at once, but max_num_seqs is {seqs}: "
                "long requests will be preempted"
            ).format(count=cap.max_concurrency, length=f"{max_len:,}", seqs=max_seqs)
        )
    else:
        verdict = OK

    # A layout fixes TP by its hosts: the single-host table of TP degrees would mislead there.
    options = _tp_options(profile, shape, w, max_len, max_seqs) if profile.nodes is None else []
    suggested_tp = next((o.tensor_parallel_size for o in options if o.fits and o.max_concurrency >= max_seqs), None)
    if suggested_tp is None:
        suggested_tp = next((o.tensor_parallel_size for o in options if o.fits), None)
    suggested_seqs = None if verdict == NO_FIT else max(1, min(max_seqs, math.floor(cap.max_concurrency)))

    offload = int((profile.engine.kv_offloading_size or 0) * GIB) // tp  # the flag's size covers all ranks
    offload_tokens = offload // kv.bytes_per_block * kv.block_size if offload else 0

    notes = []
    if not budget.exact:
        notes.append(_("activation and runtime figures are estimates; vLLM measures them when it starts"))
    if tp > 1:
        notes.append(_("weights per device assume an even split over TP ranks"))
    pp = _pp(profile)
    if pp > 1:
        notes.append(
            _("layers split evenly over {stages} pipeline stages: weights and KV per device are one stage's").format(
                stages=pp
            )
        )
    plan_layout, warnings = _layout(profile, w, budget, cap, tp) if profile.nodes is not None else (None, [])
    if kv.block_size != (profile.engine.block_size or defaults["block_size"]):
        notes.append(
            _(
                "hybrid model: the attention block grows to {tokens} tokens so one page holds a linear-attention state"
            ).format(tokens=kv.block_size)
        )
    if offload:
        notes.append(_("the DRAM tier keeps evicted blocks for prefix reuse; running requests use device blocks only"))

    return Plan(
        profile=profile.name,
        platform=profile.platform,
        model_dir=str(directory),
        model=shape,
        weights=w,
        tensor_parallel_size=tp,
        kv_cache_dtype=_kv_dtype(profile, shape),
        device_bytes=budget.device_bytes,
        utilization=budget.utilization,
        budget_bytes=budget.budget,
        weights_per_device=budget.weights,
        activation_bytes=budget.activation,
        reserve_bytes=budget.reserve,
        kv_bytes=budget.kv,
        kv_budget_exact=budget.exact,
        block_size=kv.block_size,
        kv_heads_per_device=kv.kv_heads_per_rank,
        kv_dtype_bytes=kv.kv_dtype_bytes,
        kv_bytes_per_token=kv.bytes_per_token,
        state_bytes_per_seq=kv.state_bytes_per_seq,
        bytes_per_block=kv.bytes_per_block,
        num_blocks=cap.num_blocks,
        kv_tokens=cap.kv_tokens,
        max_model_len=max_len,
        max_concurrency=cap.max_concurrency,
        max_num_seqs=max_seqs,
        offload_bytes=offload,
        offload_tokens=offload_tokens,
        verdict=verdict,
        reasons=reasons,
        suggested_max_num_seqs=suggested_seqs,
        suggested_tensor_parallel_size=suggested_tp,
        tp_options=options,
        notes=notes,
        pipeline_parallel_size=pp,
        data_parallel_size=data_parallel_size(profile),
        layout=plan_layout,
        warnings=warnings,
    )


def hccl_connect_timeout(profile: Profile) -> tuple[int, str]:
    """HCCL_CONNECT_TIMEOUT in force on the layout's hosts (the shortest), and where it comes from:
    a host's own env, else nodes.hccl_connect_timeout, else the profile's env, else HCCL's default."""
    nodes = profile.nodes
    assert nodes is not None
    base = (int(platform_defaults()["startup"]["hccl_connect_timeout_s"]), "HCCL's default, unset")
    if nodes.hccl_connect_timeout is not None:
        base = (nodes.hccl_connect_timeout, "nodes.hccl_connect_timeout")
    elif _int_or_none(profile.env.get("HCCL_CONNECT_TIMEOUT")) is not None:
        base = (int(profile.env["HCCL_CONNECT_TIMEOUT"]), "env.HCCL_CONNECT_TIMEOUT")
    values = []
    for rank in range(nodes.count):
        own = _int_or_none(nodes.host(rank).env.get("HCCL_CONNECT_TIMEOUT"))
        values.append((own, f"nodes.hosts[{rank}].env.HCCL_CONNECT_TIMEOUT") if own is not None else base)
    return min(values)


def _layout(profile: Profile, w: Weights, budget: _Budget, cap: Capacity, tp: int) -> tuple[Layout, list[str]]:
    nodes = profile.nodes
    assert nodes is not None
    pp, dp = _pp(profile), data_parallel_size(profile)
    used = tp * pp * dp // nodes.count if nodes.mode == "dp" else nodes.devices_per_host
    startup = platform_defaults()["startup"]
    rate = float(startup["load_gib_per_s"])
    per_host = budget.weights * used
    expected = per_host / GIB / rate
    timeout, source = hccl_connect_timeout(profile)
    warnings = []
    if timeout < expected:
        warnings.append(
            _(
                "HCCL_CONNECT_TIMEOUT is {timeout} s ({source}), shorter than the expected weight load of one host: "
                "{size} at {rate} GiB/s = {seconds:.0f} s. A host that loads or starts later than its peers by more "
                "than that fails with EI0006; set nodes.hccl_connect_timeout to {suggested} or more"
            ).format(
                timeout=timeout,
                source=source,
                size=_gib(per_host),
                rate=f"{rate:g}",
                seconds=expected,
                suggested=_round_up(expected * 2),
            )
        )
    return (
        Layout(
            hosts=nodes.count,
            mode=nodes.mode,
            devices_per_host=nodes.devices_per_host,
            devices_used_per_host=used,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            data_parallel_size=dp,
            expert_parallel=bool(profile.engine.enable_expert_parallel),
            expert_parallel_size=_ep_size(profile, tp),
            weights_per_host=per_host,
            kv_per_host=max(0, budget.kv) * used,
            kv_tokens=cap.kv_tokens * dp,
            max_concurrency=cap.max_concurrency * dp,
            load_gib_per_s=rate,
            expected_load_s=round(expected, 1),
            hccl_connect_timeout_s=timeout,
            hccl_connect_timeout_from=source,
        ),
        warnings,
    )


def _round_up(seconds: float) -> int:
    """A timeout to suggest: up to the next 60 s."""
    return max(60, math.ceil(seconds / 60) * 60)


def _tp_options(profile: Profile, shape: ModelShape, w: Weights, max_len: int, max_seqs: int) -> list[TPOption]:
    """What each TP degree the host can run would give (CPU: just the profile's)."""
    if profile.platform == "cpu":
        candidates = [profile.engine.tensor_parallel_size]
    else:
        candidates = [t for t in platform_defaults()["tp_candidates"] if t <= profile.device.count]
    out = []
    for tp in candidates:
        refused = _tp_allowed(shape, tp)
        if refused:
            out.append(TPOption(tp, False, 0, 0.0, refused))
            continue
        budget, kv, cap = _fit(profile, shape, w, tp, max_len)
        fits = budget.kv > 0 and cap.num_blocks >= kv.blocks_per_request(max_len)
        note = "" if fits else (_("weights do not fit") if budget.kv <= 0 else _("less than one full-length request"))
        out.append(TPOption(tp, fits, cap.kv_tokens if fits else 0, cap.max_concurrency if fits else 0.0, note))
    return out


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"
