"""doctor's checks of the host system: glibc, free disk and the serving port."""

from __future__ import annotations

from engine.doctor.checks import check
from engine.doctor.context import Context
from engine.doctor.model import Outcome, error, ok, skip, warn
from engine.errors import BadInput
from engine.i18n import N_, _
from engine.system.ports import port_holder, port_is_free
from engine.versions import release_tuple


@check("system.glibc", "system", N_("glibc new enough for the engine's wheels"))
def check_glibc(ctx: Context) -> Outcome:
    version = ctx.glibc
    if version is None:
        return skip(
            _("glibc version not known") if ctx.live else _("glibc version not known (ldd --version not recorded)")
        )
    if ctx.platform == "ascend":
        return _glibc_ascend(ctx, version)
    need = ctx.matrix.min_glibc.get(ctx.platform)
    if need and release_tuple(version) < release_tuple(need):
        return error(
            _("glibc {version} is older than {need}, the minimum of the {platform} engine's wheels").format(
                version=version, need=need, platform=ctx.platform
            ),
            _("use a distribution with glibc >= {need} (or the official container image)").format(need=need),
        )
    return ok(f"glibc {version}" + (_(" (engine needs >= {need})").format(need=need) if need else ""))


def _machine(ctx: Context) -> str | None:
    if not ctx.engine.error and ctx.engine.machine:
        return ctx.engine.machine
    if ctx.toolkit and ctx.toolkit.arch:
        return ctx.toolkit.arch
    if ctx.live:
        import platform

        return platform.machine()
    return None


def _glibc_ascend(ctx: Context, version: str) -> Outcome:
    """Against the manylinux tag of the wheels of the set pinned for the host's CANN: below it pip
    compiles vllm-ascend (and what else has no wheel) from source, which needs the CANN toolchain."""
    from engine.stacks.plan import glibc_needed, newest_set_for_glibc

    arch = _machine(ctx)
    tk = ctx.toolkit
    found = glibc_needed(tk.version if tk else None, arch)
    if found is None:
        return ok(f"glibc {version}")
    need, va = found
    if release_tuple(version) >= release_tuple(need):
        return ok(
            _("glibc {version} (the wheels of vllm-ascend {va} for {arch} need >= {need})").format(
                version=version, va=va, arch=arch, need=need
            )
        )
    if ctx.engine.packages.get("vllm-ascend") and not ctx.engine.error:
        return ok(
            _(
                "glibc {version}: below the {need} of vllm-ascend {va}'s wheels, so the installed engine was built here"
            ).format(version=version, need=need, va=va)
        )
    older = newest_set_for_glibc(version, arch or "")
    return warn(
        _(
            "glibc {version} is older than {need}, which the wheels of vllm-ascend {va} for {arch} need: "
            "installing it compiles from source, which needs the CANN toolchain and a compiler"
        ).format(version=version, need=need, va=va, arch=arch),
        _("use the official vllm-ascend container image or a distribution with glibc >= {need}").format(need=need)
        + (_("; or CANN {cann}, whose set has wheels for this glibc").format(cann=older) if older else ""),
    )


@check("system.disk", "system", N_("Free disk space for model and compile caches"))
def check_disk(ctx: Context) -> Outcome:
    if not ctx.live:
        return skip(_("disk space of a recorded machine is not known"))
    import shutil
    from pathlib import Path

    from engine.dirs import cache_dir

    where = Path(cache_dir())
    probe = where
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    free_gib = shutil.disk_usage(probe).free / 2**30
    if free_gib < 1:
        return error(
            _("{free:.1f} GiB free under {where}").format(free=free_gib, where=where),
            _("free space on that filesystem, or set ASCENDCTL_CACHE_DIR to a bigger one"),
        )
    if free_gib < 10:
        return warn(
            _("only {free:.1f} GiB free under {where} (engine compile caches and logs grow)").format(
                free=free_gib, where=where
            ),
            _("free space on that filesystem, or set ASCENDCTL_CACHE_DIR to a bigger one"),
        )
    return ok(_("{free:.0f} GiB free under {where}").format(free=free_gib, where=where))


@check("system.port", "system", N_("The serving port is free"))
def check_port(ctx: Context) -> Outcome:
    if not ctx.live:
        return skip(_("ports of a recorded machine are not known"))
    host = "127.0.0.1"
    if ctx.profile is not None:
        host = getattr(getattr(ctx.profile, "server", None), "host", host) or host
    # The same test serve's preflight makes, so doctor and serve never disagree on a port.
    try:
        free = port_is_free(host, ctx.port)
    except BadInput as exc:
        return error(exc.cause, exc.fix)
    if not free:
        # Held by a run of ours (serve, demo): that engine is what the port is for, not a conflict.
        from engine.runs import port_lock_holder

        if (run := port_lock_holder(ctx.port)) is not None:
            return ok(_("port {port} on {host} is served by {run}").format(port=ctx.port, host=host, run=run))
        holder = port_holder(ctx.port)
        return warn(
            _("port {port} is already in use on {host}").format(port=ctx.port, host=host)
            + (_(" by {holder}").format(holder=holder) if holder else ""),
            _(
                "stop what listens there (ss -ltnp 'sport = :{port}') or set server.port in the profile to a free port"
            ).format(port=ctx.port),
        )
    return ok(_("port {port} is free on {host}").format(port=ctx.port, host=host))
