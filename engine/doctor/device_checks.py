"""doctor's checks of the NPUs themselves: device nodes, npu-smi, health, fault codes, HBM and the chip."""

from __future__ import annotations

from engine.doctor.checks import NO_NPU, check, not_ascend, unrecorded
from engine.doctor.context import Context
from engine.doctor.model import Outcome, error, ok, skip, warn
from engine.doctor.stack_checks import installed_row
from engine.i18n import N_, _


@check("devices.nodes", "devices", N_("Device nodes: /dev/davinciN, davinci_manager, devmm_svm, hisi_hdc"))
def check_nodes(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    n = ctx.nodes
    if not n.davinci and unrecorded(ctx):
        return skip(_("device nodes not recorded"))
    flags = " ".join(
        f"--device {p}" for p in ["/dev/davinci0", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    )
    if not n.davinci:
        if ctx.container:
            return error(
                _("no /dev/davinciN in this container: no NPU is visible"),
                _("docker run {flags} ...  (one --device /dev/davinciN per NPU)").format(flags=flags),
            )
        return error(
            _("no /dev/davinciN: the NPU driver is not loaded"),
            _("reinstall the driver package and reboot; then `ls /dev/davinci*`"),
        )
    if n.missing_shared:
        fix = (
            f"docker run ... {' '.join('--device ' + p for p in n.missing_shared)}"
            if ctx.container
            else _("reinstall the NPU driver package (it creates these nodes), then reboot")
        )
        return error(
            _("missing {nodes} ({count} /dev/davinciN present)").format(
                nodes=", ".join(n.missing_shared), count=len(n.davinci)
            ),
            fix,
        )
    ids = n.davinci
    span = f"/dev/davinci{ids[0]}" if len(ids) == 1 else f"/dev/davinci{ids[0]}-{ids[-1]}"
    return ok(
        _("{count} NPU node(s) ({span}) and davinci_manager, devmm_svm, hisi_hdc").format(count=len(ids), span=span)
    )


@check("devices.npu_smi", "devices", N_("npu-smi present and answering (with a timeout)"))
def check_npu_smi(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    probe = ctx.npu_smi
    if not probe.found:
        if not ctx.live:
            return skip(_("npu-smi output not recorded"))
        fix = (
            "docker run ... -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi -v /usr/local/dcmi:/usr/local/dcmi"
            if ctx.container
            else _("reinstall the NPU driver (npu-smi ships with it) or add /usr/local/bin to PATH")
        )
        return error(_("npu-smi not found"), fix)
    if probe.error:
        if not ctx.live and "not recorded" in probe.error:
            return skip(_("npu-smi output not recorded"))
        return error(probe.error, probe.fix or _("run `npu-smi info` by hand"))
    t = probe.table
    return ok(
        _("npu-smi {version} answered: {count} chip(s), driver {driver}").format(
            version=t.tool_version or "N/A", count=len(t.chips), driver=t.driver_version or "N/A"
        )
    )


def _table(ctx: Context):
    if ctx.platform != "ascend":
        return None, skip(_(NO_NPU) if ctx.platform == "cpu" else _("no NPU on this host"))
    probe = ctx.npu_smi
    if probe.table is None:
        return None, skip(_("npu-smi gave no table (see devices.npu_smi)"))
    return probe.table, None


@check("devices.health", "devices", N_("Every NPU chip reports Health OK"))
def check_health(ctx: Context) -> Outcome:
    table, s = _table(ctx)
    if s is not None:
        return s
    bad = [c for c in table.chips if c.health != "OK"]
    if bad:
        listed = "; ".join(f"NPU {c.npu} chip {c.chip}: {c.health or 'N/A'}" for c in bad[:4])
        return error(
            _("{count} chip(s) not healthy: {chips}").format(count=len(bad), chips=listed),
            _(
                "devices.faults names each chip's fault codes and the action (`npu-smi info -t health -i {npu} "
                "-c {chip}` shows them); reset or replace the card as it says"
            ).format(npu=bad[0].npu, chip=bad[0].chip),
        )
    return ok(_("all {count} chip(s) report Health OK").format(count=len(table.chips)))


# What doctor says about a chip's active fault code, by MindCluster's action class: the chip must be
# isolated or reset (error), the engine on it restarted or the chip watched (warning), nothing (ok).
# The words per class live in engine/triage/faultcodes.yaml (`severity`, `do`).
HEALTH_TIMEOUT = 8.0


@check("devices.faults", "devices", N_("No NPU chip reports a fault code that needs action (npu-smi info -t health)"))
def check_faults(ctx: Context) -> Outcome:
    table, s = _table(ctx)
    if s is not None:
        return s
    from engine.triage.faultcodes import DeviceFault, device_fault

    per_card: dict[int, int] = {}
    for c in table.chips:
        per_card[c.npu] = per_card.get(c.npu, 0) + 1
    seen: list[tuple[str, int, int, DeviceFault]] = []  # (where, npu, chip, fault)
    unread: list[str] = []
    for c in table.chips:
        if c.health == "OK":
            continue  # a healthy chip has no active code; asking each one would cost a call per chip
        where = f"NPU {c.npu}" if per_card[c.npu] == 1 else f"NPU {c.npu} chip {c.chip}"
        codes = _health_codes(ctx, c.npu, c.chip)
        if codes is None:
            unread.append(f"{where} ({c.health or 'N/A'})")
            continue
        seen.extend((where, c.npu, c.chip, device_fault(code)) for code in codes)
    if not seen and not unread:
        return ok(_("no fault code: all {count} chip(s) report Health OK").format(count=len(table.chips)))
    return fault_outcome(seen, unread)


def fault_outcome(seen: list, unread: list[str]) -> Outcome:
    """The verdict on the active codes `seen` [(where, npu, chip, DeviceFault)] and the unhealthy
    chips whose codes could not be read: error when a chip must be isolated or reset, warning
    when the engine on it must restart, it is sub-healthy or its code is unknown, ok otherwise."""
    rank = {"error": 0, "warning": 1, "ok": 2}
    seen = sorted(seen, key=lambda r: (rank[r[3].severity], r[1], r[2]))
    listed = _("; ").join(_fault_text(where, f) for where, _n, _c, f in seen[:6])
    if len(seen) > 6:
        listed += _("; {count} more").format(count=len(seen) - 6)
    if unread:
        unreadable = _("codes not readable for {chips}").format(chips=", ".join(unread))
        listed = _("; ").join(filter(None, [listed, unreadable]))
    worst = seen[0][3].severity if seen else "warning"
    if worst == "ok" and unread:
        worst = "warning"
    if worst == "ok":
        return ok(listed)
    fix = _fault_fix(seen) if seen and seen[0][3].severity != "ok" else ""
    if unread and not fix:
        fix = _(
            "run `npu-smi info -t health -i N -c C` for those chips and look their codes up with `ascendctl triage`"
        )
    return (error if worst == "error" else warn)(listed, fix)


def _health_codes(ctx: Context, npu: int, chip: int) -> tuple[str, ...] | None:
    """The chip's active codes from `npu-smi info -t health -i N -c C`; None when it cannot be read."""
    from engine.devices.npu_smi import parse_health
    from engine.errors import Unreachable
    from engine.system.runner import ToolMissing, ToolTimeout

    program = ctx.npu_smi_path or "npu-smi"
    # The card's answer first (`-i N -t health`, FaultDiag's order, which a bundle records), then the
    # chip's (`-t health -i N -c C`, as the device panel asks). A live npu-smi answers both.
    for argv, card_level in (
        ([program, "info", "-i", str(npu), "-t", "health"], True),
        ([program, "info", "-t", "health", "-i", str(npu), "-c", str(chip)], False),
    ):
        try:
            answer = parse_health(ctx.host.runner.run(argv, timeout=HEALTH_TIMEOUT).stdout)
        except ToolMissing:
            continue  # not recorded in this form (a recorded machine): try the other
        except (ToolTimeout, Unreachable):
            return None
        if not answer:
            continue
        if card_level and chip in answer:
            return answer[chip].error_codes
        if card_level and len(answer) > 1:
            continue  # a card of several chips whose blocks carry no Chip ID: ask the chip
        # a one-chip card, or the chip-level answer: one block and no `Chip ID` line
        return next(iter(answer.values())).error_codes
    return None


def _fault_text(where: str, fault) -> str:
    """ "NPU 3: 0x80E18402 HBM multi-bit ECC -> isolate this NPU (SeparateNPU)" """
    from engine.i18n import message_language
    from engine.triage.localize import localized_fault

    return f"{where}: {localized_fault(fault, message_language())['headline']}"


def _fault_fix(seen) -> str:
    """One concrete step per NPU for its most serious code (the list is sorted worst first)."""
    steps: dict[int, str] = {}
    for _rank, npu, chip, fault in seen:
        if npu in steps or fault.severity == "ok":
            continue
        step = {
            "isolate": _("take NPU {npu} out of service (ASCEND_RT_VISIBLE_DEVICES without it) and have it repaired"),
            "reset-npu": _(
                "stop the engine on NPU {npu}, reset it with `npu-smi set -t reset -i {npu} -c {chip}`, start it again"
            ),
            "restart-engine": _("restart the engine on NPU {npu}"),
            "watch": _("watch NPU {npu} and move the engine off it at the next window"),
        }.get(fault.verb, _("look NPU {npu}'s code {code} up in the board's fault-code reference"))
        steps[npu] = step.format(npu=npu, chip=chip, code=fault.code)
    return _("; ").join(steps.values())


@check(
    "devices.memory",
    "devices",
    N_("Device memory per card (HBM on 910B / A3, DDR on 310P) and how much is already used"),
)
def check_memory(ctx: Context) -> Outcome:
    table, s = _table(ctx)
    if s is not None:
        return s
    rows = []
    busy = []
    for c in table.chips:
        pair_ = c.hbm or c.ddr
        if not pair_:
            continue
        used, total = pair_
        rows.append(total)
        if used is not None and total and used > 0.25 * total:
            busy.append(f"NPU {c.npu}.{c.chip} {used}/{total} MB")
    if not rows:
        return skip(_("npu-smi reported no memory figures"))
    kind = "HBM" if any(c.hbm for c in table.chips) else _("memory")
    sizes = sorted(set(rows))
    size = f"{sizes[0]} MB" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]} MB"
    if busy:
        return warn(
            _("{kind} {size} per chip; already in use: {busy}").format(kind=kind, size=size, busy=", ".join(busy[:4])),
            _(
                "npu-smi info shows the processes holding it; stop them or choose other NPUs with ASCEND_RT_VISIBLE_DEVICES"
            ),
        )
    return ok(_("{count} chip(s) with {size} {kind} each, idle").format(count=len(rows), size=size, kind=kind))


@check("devices.chip", "devices", N_("The chip is one vLLM-Ascend supports, with the dtypes it can run"))
def check_chip(ctx: Context) -> Outcome:
    table, s = _table(ctx)
    if s is not None:
        return s
    names = sorted({c.name for c in table.chips})
    problems, described = [], []
    row = installed_row(ctx) if not ctx.engine.error else None
    for name in names:
        chip = ctx.matrix.chip(name)
        if chip is None:
            problems.append(_("{chip} is not a chip the matrix knows").format(chip=name))
            continue
        if not chip.supported:
            return error(
                _("{chip} ({family}) is not supported by vLLM-Ascend").format(chip=name, family=chip.family),
                _("serve on Atlas A2 (910B), A3 or 300I Duo (310P) hardware"),
            )
        described.append(f"{name} ({chip.family}: {', '.join(chip.dtypes)})")
        wrong_build = _wrong_build(ctx, name, chip.family)
        if wrong_build is not None:
            return wrong_build
        if row is not None and chip.family not in row.hardware:
            problems.append(
                _("vllm-ascend {va} does not support {family} ({chip})").format(
                    va=row.vllm_ascend, family=chip.family, chip=name
                )
            )
    if problems:
        return warn(
            _("; ").join(problems),
            _("install a vllm-ascend release whose hardware list includes this chip (see engine/stacks/matrix.yaml)"),
        )
    return ok(", ".join(described))


def _wrong_build(ctx: Context, name: str, family: str) -> Outcome | None:
    """vllm-ascend installs, then refuses the chip at start-up when it is another family's build
    (PyPI's wheel is the A2 build): read what the installed build says it is for."""
    from engine.stacks.plan import build_device_types, soc_versions

    built = None if ctx.engine.error else ctx.engine.vllm_ascend_device_type
    types = build_device_types()
    want = types.get(family)
    if not built or not want or built == want:
        return None
    made_for = {v: k for k, v in types.items()}.get(built, built)
    return error(
        _(
            "vllm-ascend here is the {made_for} build (its _build_info.py says {built}); this host's {chip} is {family}"
        ).format(made_for=made_for, built=built, chip=name, family=family),
        _(
            "install the {family} build: `ascendctl engine plan --chip {family}` lists the steps (the per-chip "
            "index from v0.22.1rc1, else a source build with SOC_VERSION={soc})"
        ).format(family=family, soc=soc_versions().get(family, "?")),
    )


# -- system -------------------------------------------------------------------------------------
