"""Checks of the machine against a serving profile (`ascendctl doctor --profile P`).

They use team-wide contracts: the Profile of `engine.profiles` (platform, device, engine, env)
and `engine.capacity.plan` for the memory budget when the model directory is present.
"""

from __future__ import annotations

from typing import Any

from engine.doctor.checks import check
from engine.doctor.context import Context
from engine.doctor.model import Outcome, error, ok, skip, warn
from engine.dtypes import canonical_dtype
from engine.errors import AscendctlError
from engine.i18n import N_, _
from engine.system.devnodes import visible_devices

DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default


def _visible(ctx: Context) -> tuple[list[int] | None, str]:
    """NPU ids the engine will see: the profile's ASCEND_RT_VISIBLE_DEVICES wins over the shell's."""
    raw = (ctx.profile.env or {}).get("ASCEND_RT_VISIBLE_DEVICES")
    if raw is not None:
        return [int(x) for x in str(raw).replace(" ", "").split(",") if x.isdigit()], _(
            "the profile's ASCEND_RT_VISIBLE_DEVICES"
        )
    ids = visible_devices(ctx.host)
    if ids is not None:
        return ids, "ASCEND_RT_VISIBLE_DEVICES"
    return None, ""


def _host_npus(ctx: Context) -> list[Any]:
    """Chips npu-smi listed (logical order), or an empty list."""
    table = ctx.npu_smi.table if ctx.platform == "ascend" else None
    return list(table.chips) if table is not None else []


@check("profile.platform", "profile", N_("The profile is written for this kind of machine"), needs_profile=True)
def check_profile_platform(ctx: Context) -> Outcome:
    want = ctx.profile.platform
    if want == ctx.platform:
        same = _("profile {profile} is for an ascend host, and this is one") if want == "ascend" else None
        same = same or _("profile {profile} is for {platform}, and this is a {platform} host")
        return ok(same.format(profile=ctx.profile.name, platform=want))
    if ctx.platform == "cpu":
        return error(
            _("profile {profile} is for {platform}, but this host has no NPU or GPU").format(
                profile=ctx.profile.name, platform=want
            ),
            _("use a CPU profile here (ascendctl doctor --profile cpu-tiny), or run on the machine the profile is for"),
        )
    return warn(
        _("profile {profile} is for {platform}, this host is {host}").format(
            profile=ctx.profile.name, platform=want, host=ctx.platform
        ),
        _("use a profile written for {platform} (`ascendctl profile list`)").format(platform=ctx.platform),
    )


@check("profile.tp", "profile", N_("Tensor-parallel degree fits the NPUs the engine will see"), needs_profile=True)
def check_profile_tp(ctx: Context) -> Outcome:
    if ctx.platform != "ascend" or ctx.profile.platform != "ascend":
        return skip(_("not an Ascend profile on an Ascend host"))
    tp = ctx.profile.engine.tensor_parallel_size
    chips = _host_npus(ctx)
    present = len(chips) or len(ctx.nodes.davinci)
    ids, source = _visible(ctx)
    if ids is not None:
        beyond = [i for i in ids if i >= present] if present else []
        if beyond:
            return error(
                _("{source} names NPU {ids}, but this host has {count} NPU(s) (0-{last})").format(
                    source=source, ids=", ".join(map(str, beyond)), count=present, last=present - 1
                ),
                _("set ASCEND_RT_VISIBLE_DEVICES in the profile to ids below {count}").format(count=present),
            )
        visible = len(ids)
    else:
        visible, source = present, _("all NPUs present")
    if tp > visible:
        ids_hint = ",".join(str(i) for i in range(tp))
        return error(
            _("tensor_parallel_size {tp} needs {tp} NPUs, but the engine will see {visible} ({source})").format(
                tp=tp, visible=visible, source=source
            ),
            _(
                'set engine.tensor_parallel_size to {visible} or fewer, or env ASCEND_RT_VISIBLE_DEVICES: "{ids}" '
                "(host has {count})"
            ).format(visible=visible, ids=ids_hint, count=present),
        )
    if tp < visible and ids is not None:
        return warn(
            _("tensor_parallel_size {tp} uses {tp} of the {visible} NPUs in {source}; the rest stay idle").format(
                tp=tp, visible=visible, source=source
            ),
            _("list only {tp} NPU(s) in ASCEND_RT_VISIBLE_DEVICES, or raise tensor_parallel_size").format(tp=tp),
        )
    return ok(
        _("tensor_parallel_size {tp} on {visible} visible NPU(s) ({source})").format(
            tp=tp, visible=visible, source=source
        )
    )


@check(
    "profile.dtype", "profile", N_("The profile's dtype is one the chip runs (310P: float16 only)"), needs_profile=True
)
def check_profile_dtype(ctx: Context) -> Outcome:
    if ctx.platform != "ascend":
        return skip(_("dtype limits apply to NPUs"))
    names = sorted({c.name for c in _host_npus(ctx)})
    if not names:
        return skip(_("chip name unknown (npu-smi gave no table)"))
    # `half` is float16 to vLLM: compare canonical names, as the schema and the planner do.
    dtype = canonical_dtype(ctx.profile.engine.dtype) or "auto"
    for name in names:
        chip = ctx.matrix.chip(name)
        if chip is None or not chip.dtypes:
            continue
        if dtype == "auto" and "bfloat16" not in chip.dtypes:
            return warn(
                _("dtype auto on {chip}: models saved in bfloat16 fail there ({family} runs {dtypes})").format(
                    chip=name, family=chip.family, dtypes=", ".join(chip.dtypes)
                ),
                _("set engine.dtype: float16 in the profile"),
            )
        if dtype not in ("auto", *chip.dtypes):
            return error(
                _("dtype {dtype} is not supported on {chip} ({family} runs {dtypes} only)").format(
                    dtype=dtype, chip=name, family=chip.family, dtypes=", ".join(chip.dtypes)
                ),
                _("set engine.dtype: {dtype} in the profile").format(dtype=chip.dtypes[0]),
            )
    return ok(_("dtype {dtype} runs on {chips}").format(dtype=dtype, chips=", ".join(names)))


@check(
    "profile.memory",
    "profile",
    N_("Device memory: the profile's HBM and the plan against what the cards have free"),
    needs_profile=True,
)
def check_profile_memory(ctx: Context) -> Outcome:
    if ctx.platform != "ascend" or ctx.profile.platform != "ascend":
        return skip(_("not an Ascend profile on an Ascend host"))
    chips = _host_npus(ctx)
    if not chips:
        return skip(_("npu-smi gave no memory figures"))
    ids, _source = _visible(ctx)
    ids = ids if ids is not None else list(range(len(chips)))
    used_chips = [chips[i] for i in ids if i < len(chips)] or chips
    mem = [(c, c.hbm or c.ddr) for c in used_chips if (c.hbm or c.ddr)]
    if not mem:
        return skip(_("npu-smi gave no memory figures"))
    total_mb = min(m[1] for _, m in mem)
    declared = ctx.profile.device.hbm_gib
    if declared and total_mb < declared * 1024 * 0.97:
        return error(
            _("the profile assumes {declared:g} GiB per device, the cards have {total:.0f} GiB").format(
                declared=declared, total=total_mb / 1024
            ),
            _("set device.hbm_gib: {gib} in the profile, then re-run `ascendctl plan`").format(gib=total_mb // 1024),
        )
    util = ctx.profile.engine.gpu_memory_utilization or DEFAULT_UTILIZATION
    busy = [(c, m) for c, m in mem if m[0] is not None and m[0] > (1 - util) * m[1]]
    if busy:
        c, (used, total) = busy[0]
        return error(
            _(
                "NPU {npu} already has {used} of {total} MB in use; gpu_memory_utilization {util:g} needs "
                "{need:.0f} MB of it free"
            ).format(npu=c.npu, used=used, total=total, util=util, need=util * total),
            _(
                "stop the process holding it (npu-smi info lists it), pick other NPUs, or lower "
                "engine.gpu_memory_utilization"
            ),
        )
    verdict = _plan_verdict(ctx)
    if isinstance(verdict, Outcome):
        return verdict
    return ok(
        _("{count} device(s) with {total} MB each, {util:g} of it free for the engine; {verdict}").format(
            count=len(mem), total=total_mb, util=util, verdict=verdict
        )
    )


def _plan_verdict(ctx: Context) -> Outcome | str:
    """The memory plan's verdict, when the model is on this machine (plan reads its files)."""
    if not ctx.live and ctx.model_dir is None:
        return _("plan not run (recorded machine: give --model DIR)")
    from engine.capacity import NO_FIT, TIGHT, plan

    try:
        p = ctx.plan if ctx.plan is not None else plan(ctx.profile, ctx.model_dir)
    except AscendctlError as exc:
        return _("plan not run ({cause})").format(cause=exc.cause)
    reasons = _("; ").join(p.reasons) or p.verdict
    if p.verdict == NO_FIT:
        tp = (
            _(" (tensor_parallel_size {tp} fits)").format(tp=p.suggested_tensor_parallel_size)
            if p.suggested_tensor_parallel_size
            else ""
        )
        return error(
            _("the plan says the model does not fit: {reasons}{tp}").format(reasons=reasons, tp=tp),
            _("ascendctl plan --profile {profile} shows the budget").format(profile=ctx.profile.name),
        )
    if p.verdict == TIGHT:
        return warn(
            _("the plan is tight: {reasons}").format(reasons=reasons),
            f"set engine.max_num_seqs: {p.suggested_max_num_seqs}"
            if p.suggested_max_num_seqs
            else f"ascendctl plan --profile {ctx.profile.name}",
        )
    return _("plan ok: {tokens:,} KV tokens, {concurrency:.1f}x max_model_len").format(
        tokens=p.kv_tokens, concurrency=p.max_concurrency
    )
