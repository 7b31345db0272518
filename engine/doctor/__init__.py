"""`ascendctl doctor`: is this machine able to serve?

    report = run_doctor()                       # this machine
    report = run_doctor(root="recorded/tree")   # a machine recorded as a directory tree
    report.exit_code(strict=False)              # 0 clean / warnings, 1 errors

Every check runs even when others fail; a check that raises becomes an error row naming the
exception, never a crash of the report.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from engine.doctor.checks import CHECKS, Check
from engine.doctor.context import Context
from engine.doctor.model import CheckInfo, CheckResult, DoctorReport, Outcome, Status
from engine.errors import BadInput
from engine.i18n import N_, _
from engine.system.host import Host

__all__ = [
    "CheckInfo",
    "CheckResult",
    "Context",
    "DoctorReport",
    "Status",
    "list_checks",
    "run_checks",
    "run_doctor",
]


# The modules that register their checks when imported, in the order the report lists them.
CHECK_MODULES = (
    "cann_checks",
    "stack_checks",
    "device_checks",
    "system_checks",
    "container_checks",
    "limits",
    "profile_checks",
    "perf_checks",
)


def _all_checks() -> list[Check]:
    import importlib

    for name in CHECK_MODULES:
        importlib.import_module(f"engine.doctor.{name}")
    return CHECKS


def list_checks() -> list[CheckInfo]:
    return [c.info for c in _all_checks()]


def _run_one(check: Check, ctx: Context) -> CheckResult:
    try:
        out = check.fn(ctx)
        if not isinstance(out, Outcome):
            raise TypeError(f"check returned {type(out).__name__}")
    except Exception as exc:  # a bug or a surprise on this machine: one row, the report goes on
        return CheckResult(
            check.id,
            check.category,
            Status.ERROR,
            f"check crashed: {type(exc).__name__}: {exc}"[:300],
            "run `ascendctl doctor --debug` and report the traceback",
        )
    return CheckResult(check.id, check.category, out.status, out.summary, out.fix)


def _facts(ctx: Context) -> dict[str, Any]:
    """The versions found, for the report header and for scripts."""

    def safe(fn):
        try:
            return fn()
        except Exception:
            return None

    tk = safe(lambda: ctx.toolkit)
    d = safe(lambda: ctx.driver)
    fw = safe(lambda: ctx.firmware)
    e = safe(lambda: ctx.engine)
    t = safe(lambda: ctx.npu_smi.table) if ctx.platform == "ascend" else None
    return {
        "cann": {
            "version": tk.version,
            "home": tk.home,
            "real_home": tk.real_home,
            "layout": tk.layout,
            "version_source": tk.version_source,
        }
        if tk
        else None,
        "driver": d.version if d else None,
        "firmware": fw.version if fw else None,
        "container": ctx.container,
        "engine": {
            "interpreter": e.interpreter,
            "python": e.python,
            "vllm": e.vllm,
            "vllm_distribution": e.vllm_distribution,
            "packages": e.packages,
            "torch_cxx11_abi": e.torch_cxx11_abi,
            "error": e.error,
        }
        if e
        else None,
        "npus": [
            {
                "npu": c.npu,
                "chip": c.chip,
                "name": c.name,
                "health": c.health,
                "hbm_mb": list(c.hbm) if c.hbm else None,
                "memory_mb": list(c.ddr) if c.ddr else None,
            }
            for c in t.chips
        ]
        if t is not None
        else None,
        "glibc": safe(lambda: ctx.glibc),
        "perf": ctx.__dict__.get("perf_facts") or None,
    }


def host_name(host: Host, live: bool) -> str:
    """This machine's name; for a recording, its `/etc/hostname`, else the tree's folder name.
    `doctor --compare` names the host that differs with it."""
    if live:
        import socket

        return socket.gethostname()
    text = host.read_text("/etc/hostname")
    return text.strip() if text and text.strip() else host.root.name


def _selects(check: Check, name: str) -> bool:
    if name.endswith(".*"):  # `--check perf.*`: the group, as a shell user writes it
        name = name[:-2]
    return check.id == name or check.id.startswith(name + ".") or check.category == name


def check_selection(only: list[str] | None, with_profile: bool) -> None:
    """BadInput (exit 2) for a --check that names no check: a typo must not run nothing and then
    report the machine "ready to serve"."""
    every = _all_checks()
    for name in only or ():
        matched = [c for c in every if _selects(c, name)]
        if not matched:
            from engine.profiles.schema import suggest

            known = sorted({c.id for c in every} | {c.category for c in every})
            raise BadInput(
                f"no doctor check or category named {name!r}{suggest(name, known)}",
                "`ascendctl doctor --list-checks` lists every check id and category",
            )
        if not with_profile and all(c.needs_profile for c in matched):
            raise BadInput(
                f"{name!r} checks the machine against a serving profile, and none was given",
                f"add the profile: ascendctl doctor --profile P --check {name}",
            )


def run_checks(ctx: Context, only: list[str] | None = None) -> list[CheckResult]:
    check_selection(only, ctx.profile is not None)
    chosen = [c for c in _all_checks() if (ctx.profile is not None or not c.needs_profile)]
    if only:
        chosen = [c for c in chosen if any(_selects(c, o) for o in only)]
    return [_run_one(c, ctx) for c in chosen]


# The perf group says how fast the host can serve: its findings do not make it "not ready", unless
# it runs alone (`--check perf`), as a tuning gate.
ADVISORY = ("perf",)


def _advisory(only: list[str] | None) -> tuple[str, ...]:
    if only and all(n.split(".")[0] in ADVISORY for n in only):
        return ()
    return ADVISORY


def _headline(ctx: Context, checks: list[CheckResult], advisory: tuple[str, ...] = ()) -> str:
    errors = sum(1 for c in checks if c.status is Status.ERROR and c.category not in advisory)
    warns = sum(1 for c in checks if c.status is Status.WARN and c.category not in advisory)
    tuning = sum(
        1 for c in checks if c.status is not Status.OK and c.status is not Status.SKIP and c.category in advisory
    )
    where = {"cpu": N_("no NPU: CPU engine"), "cuda": N_("CUDA GPU host"), "ascend": N_("Ascend NPU host")}[
        ctx.platform
    ]
    if errors:
        state = _("{errors} error(s), {warns} warning(s): not ready to serve").format(errors=errors, warns=warns)
    elif warns:
        state = _("{warns} warning(s), no errors").format(warns=warns)
    else:
        state = _("ready to serve")
    if tuning:
        state += _("; {count} perf finding(s)").format(count=tuning)
    return _("{where}; {state}").format(where=_(where), state=state)


def run_doctor(
    root: str | Path | None = None,
    *,
    host: Host | None = None,
    env_known: bool = True,
    port: int = 8000,
    profile: Any = None,
    profile_name: str | None = None,
    model_dir: str | None = None,
    only: list[str] | None = None,
    plan: Any = None,
) -> DoctorReport:
    """Run every check against this machine (default), a recorded tree (`root`), or `host`.
    `plan`: the memory plan of `profile` for `model_dir` when the caller has made it already (the
    launch preflight): doctor judges that one instead of planning again.

    Raises engine.errors.Unreachable when `root` is not a directory (nothing can be probed).
    """
    check_selection(only, profile is not None)  # before any probe starts
    live = host is None and root is None
    if root is not None:
        from engine.system.recorded import recorded_host

        host, env_known = recorded_host(root)
    elif host is None:
        host = Host()
    if profile is not None and getattr(getattr(profile, "server", None), "port", None):
        port = profile.server.port
    started = time.perf_counter()
    ctx = Context(
        host,
        live=live,
        env_known=env_known,
        port=port,
        profile=profile,
        profile_name=profile_name,
        model_dir=model_dir,
        plan=plan,
    )
    checks = run_checks(ctx, only)
    facts = _facts(ctx)
    facts["host"] = host_name(host, live)
    facts["elapsed_s"] = round(time.perf_counter() - started, 3)
    return DoctorReport(
        platform=ctx.platform,
        headline=_headline(ctx, checks, _advisory(only)),
        # An archive (an `ascendctl bundle`) is named as given, not as the folder it was unpacked to.
        root=str(root) if root is not None and Path(root).is_file() else str(host.root),
        live=live,
        checks=tuple(checks),
        facts=facts,
        profile=profile_name,
        advisory=_advisory(only),
    )
