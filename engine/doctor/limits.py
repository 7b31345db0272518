"""doctor's check of the open-file limit the engine will inherit (`ulimit -n`).

vLLM raises its soft limit to 65,535 at start-up (vllm/utils/system_utils.py, set_ulimit), and
can only when the hard limit allows it; otherwise it logs "Found ulimit of N and failed to
automatically increase" and serves with N. Each client connection holds a descriptor, so N bounds
the connections one server can hold. Whether that matters depends on N: 20,000 serves any demo
and most deployments; 1,024 (a common login default) runs out under a busy load test.
"""

from __future__ import annotations

from engine.doctor.checks import check
from engine.doctor.context import Context
from engine.doctor.model import Outcome, ok, skip, warn
from engine.i18n import N_, _

VLLM_TARGET = 65535  # what vLLM asks for
# Below this, a load of a few thousand connections runs out. The one threshold for the open-file
# limit: triage's vllm-fd-ulimit-low rule reads it too (`below:` in engine/triage/rules.yaml).
ENOUGH = 8192


def effective(soft: int, hard: int) -> int:
    """The limit the engine serves with: vLLM's target when the hard limit allows it, else the
    soft limit it found (it does not raise it part of the way)."""
    import resource

    if soft == resource.RLIM_INFINITY or soft >= VLLM_TARGET:
        return soft
    return VLLM_TARGET if _allows(hard, VLLM_TARGET) else soft


def _allows(hard: int, value: int) -> bool:
    import resource

    return hard == resource.RLIM_INFINITY or hard >= value


def _show(n: int) -> str:
    import resource

    return "unlimited" if n == resource.RLIM_INFINITY else f"{n:,}"


def judge(soft: int, hard: int) -> Outcome:
    limit = effective(soft, hard)
    if _allows(limit, VLLM_TARGET):
        how = (
            ""
            if limit == soft
            else _(" (soft {soft}; the hard limit {hard} lets vLLM raise it)").format(
                soft=_show(soft), hard=_show(hard)
            )
        )
        return ok(_("open files: {limit}").format(limit=_show(limit)) + how)
    if limit >= ENOUGH:
        return ok(
            _(
                "open files: {limit} (hard {hard}); vLLM asks for {target} and will log that it "
                "cannot raise it, but this many connections is plenty here"
            ).format(limit=_show(limit), hard=_show(hard), target=f"{VLLM_TARGET:,}")
        )
    raise_to = hard if hard > soft else None
    fix = (
        f"ulimit -n {raise_to} before starting (the hard limit allows it); for more, raise the hard limit"
        if raise_to
        else "raise the hard limit: as root ulimit -Hn 65536, LimitNOFILE=65536 in a systemd unit, "
        "--ulimit nofile=65536:65536 for a container"
    )
    return warn(
        f"open files: {_show(limit)} (soft {_show(soft)}, hard {_show(hard)}), and vLLM cannot raise it to "
        f"{VLLM_TARGET:,}: a busy server runs out of descriptors ('Too many open files')",
        fix,
    )


@check("system.nofile", "system", N_("The open-file limit (ulimit -n) lets the engine hold its connections"))
def check_nofile(ctx: Context) -> Outcome:
    if not ctx.live:
        return skip(_("the limits of a recorded machine are not known"))
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return judge(soft, hard)
