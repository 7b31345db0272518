"""doctor's checks of the Ascend software on the host: the CANN toolkit and its set_env.sh,
NNAL (ATB) and its ABI, the driver and firmware and their pairing with CANN, and the library
path that must find them."""

from __future__ import annotations

import posixpath
import shlex

from engine.doctor.checks import check, not_ascend, unrecorded
from engine.doctor.context import Context
from engine.doctor.model import Outcome, error, ok, skip, warn
from engine.i18n import N_, _
from engine.stacks.pins import ascend_set, ascend_sets
from engine.system import paths
from engine.system.cann import default_set_env
from engine.system.driver import firmware_in_range, pair
from engine.system.ldpath import DRIVER_DIRS, SYSTEM_DIRS, abi_of, analyze, atb_libs
from engine.versions import cann_key, quoted


@check("cann.toolkit", "cann", N_("CANN toolkit found and its version read from its own files"))
def check_toolkit(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    tk = ctx.toolkit
    if tk is None and unrecorded(ctx):
        return skip(_("CANN toolkit files not recorded"))
    if tk is None:
        return error(
            _(
                "CANN toolkit not found (ASCEND_TOOLKIT_HOME unset; nothing in /usr/local/Ascend/cann-<ver> "
                "or /usr/local/Ascend/ascend-toolkit/latest)"
            ),
            _(
                "install the CANN toolkit (Ascend-cann-toolkit_<version>_linux-<arch>.run --install), "
                "or set ASCEND_TOOLKIT_HOME to its prefix"
            ),
        )
    where = (
        _("{home} ({layout} layout, named by {by})").format(home=tk.home, layout=tk.layout, by=tk.found_by)
        if tk.found_by != "default path"
        else _("{home} ({layout} layout)").format(home=tk.home, layout=tk.layout)
    )
    if tk.bad_version is not None:
        return warn(
            _("CANN toolkit at {where}: {file} holds no version but {text}").format(
                where=where, file=tk.version_source, text=quoted(tk.bad_version)
            ),
            _("check {file}; reinstall the toolkit if it is damaged").format(file=tk.version_source),
        )
    if tk.version is None:
        return warn(
            _("CANN toolkit at {where} has no readable version file").format(where=where),
            _("check {home}/<arch>-linux/ascend_toolkit_install.info; reinstall the toolkit if it is missing").format(
                home=tk.home
            ),
        )
    known = ", ".join(ascend_sets())
    oldest, newest = cann_range(ctx)
    if oldest and cann_key(tk.version) < cann_key(oldest):
        # No vllm-ascend release runs on it: the engine cannot start, whatever else is right.
        return error(
            _(
                "CANN {version} at {where} is older than every vllm-ascend release supports (CANN {oldest} to {newest})"
            ).format(version=tk.version, where=where, oldest=oldest, newest=newest),
            _("install CANN {oldest} or newer; ascendctl pins a whole engine set for CANN {known}").format(
                oldest=oldest, known=known
            ),
        )
    if ctx.matrix.torch_npu_builds(tk.version) or ascend_set(tk.version):
        return ok(_("CANN {version} at {where}").format(version=tk.version, where=where))
    return warn(
        _("CANN {version} at {where} is not in the compatibility matrix").format(version=tk.version, where=where),
        _("use a CANN release the stack was tested with: {known}").format(known=known),
    )


def cann_range(ctx: Context) -> tuple[str | None, str | None]:
    """The oldest and newest CANN release a vllm-ascend row of the matrix was tested with."""
    canns = sorted({r.cann for r in ctx.matrix.releases if r.cann}, key=cann_key)
    return (canns[0], canns[-1]) if canns else (None, None)


def _points_at(ctx: Context, value: str, target_real: str) -> bool:
    return paths.realpath(ctx.host, value.rstrip("/")) == target_real


@check("cann.set_env", "cann", N_("set_env.sh sourced: its variables present and pointing at the toolkit"))
def check_set_env(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    if not ctx.env_known:
        return skip(_("environment not recorded"))
    tk = ctx.toolkit
    env = ctx.host.env
    script = (tk.set_env if tk else None) or default_set_env(ctx.host)
    fix = _("source {script}   (add the line to ~/.bashrc so every shell has it)").format(script=script)
    missing = [v for v in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH") if not env.get(v)]
    if tk is None:
        return skip(_("no toolkit found to compare with"))
    if len(missing) == 2:
        return error(_("set_env.sh not sourced: ASCEND_TOOLKIT_HOME and ASCEND_HOME_PATH are unset"), fix)
    wrong = []
    for var, sub in (
        ("ASCEND_TOOLKIT_HOME", ""),
        ("ASCEND_HOME_PATH", ""),
        ("ASCEND_OPP_PATH", "/opp"),
        ("ASCEND_AICPU_PATH", ""),
    ):
        value = env.get(var)
        if value and not _points_at(ctx, value, tk.real_home + sub):
            state = (
                _("a missing directory")
                if not paths.exists(ctx.host, value)
                else _("not {path}").format(path=tk.real_home + sub)
            )
            wrong.append(f"{var}={value} ({state})")
    if wrong:
        return error(
            _("set_env.sh variables do not point at the toolkit in use ({home}): {wrong}").format(
                home=tk.real_home, wrong=_("; ").join(wrong)
            ),
            fix,
        )
    if missing or not env.get("ASCEND_OPP_PATH"):
        absent = missing + ([] if env.get("ASCEND_OPP_PATH") else ["ASCEND_OPP_PATH"])
        return warn(_("set_env.sh only partly applied: {names} unset").format(names=", ".join(absent)), fix)
    return ok(
        _("set_env.sh sourced: ASCEND_TOOLKIT_HOME, ASCEND_HOME_PATH, ASCEND_OPP_PATH point at {home}").format(
            home=tk.real_home
        )
    )


@check("cann.nnal", "cann", N_("NNAL (ATB) installed and its set_env.sh sourced (libatb.so)"))
def check_nnal(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    atb_root = "/usr/local/Ascend/nnal/atb"
    installed = paths.is_dir(ctx.host, atb_root)
    home = ctx.host.env.get("ATB_HOME_PATH", "") if ctx.env_known else ""
    if home and paths.exists(ctx.host, f"{home}/lib/libatb.so"):
        return ok(_("NNAL ATB sourced: ATB_HOME_PATH={home}").format(home=home))
    if home and unrecorded(ctx):
        return ok(_("NNAL ATB sourced: ATB_HOME_PATH={home} (its files not recorded)").format(home=home))
    if home:
        return error(
            _("ATB_HOME_PATH={home} holds no lib/libatb.so").format(home=home),
            _("source {root}/set_env.sh again, or reinstall NNAL for this CANN version").format(root=atb_root),
        )
    if not installed and unrecorded(ctx):
        if not ctx.env_known:
            return skip(_("NNAL files and environment not recorded"))
        return warn(
            _(
                "ATB_HOME_PATH is unset: NNAL's set_env.sh is not sourced (vLLM-Ascend fails with libatb.so: cannot "
                "open shared object file)"
            ),
            _("source {root}/set_env.sh, or install NNAL for this CANN version first").format(root=atb_root),
        )
    if installed:
        if not ctx.env_known:
            return ok(_("NNAL installed at {root} (environment not recorded)").format(root=atb_root))
        return warn(
            _(
                "NNAL installed but its set_env.sh is not sourced "
                "(vLLM-Ascend fails with libatb.so: cannot open shared object file)"
            ),
            f"source {atb_root}/set_env.sh",
        )
    version = ctx.toolkit.version if ctx.toolkit and ctx.toolkit.version else "<CANN version>"
    return warn(
        _("NNAL (ATB) not installed: vLLM-Ascend needs libatb.so"),
        _("install Ascend-cann-nnal_{version}_linux-<arch>.run, then source {root}/set_env.sh").format(
            version=version, root=atb_root
        ),
    )


@check("cann.nnal_abi", "cann", N_("NNAL (ATB) sourced for the C++ ABI torch was built with"))
def check_nnal_abi(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    if not ctx.env_known:
        return skip(_("environment not recorded"))
    atb_root = "/usr/local/Ascend/nnal/atb"
    home = ctx.host.env.get("ATB_HOME_PATH", "")
    home_abi = abi_of(home)
    # The loader takes libatb.so from the first ATB directory on the path; ATB_HOME_PATH is what
    # torch_npu and the ATB tools read. Both must be the build for torch's ABI.
    libs = atb_libs(ctx.host.env.get("LD_LIBRARY_PATH"))
    first = libs[0] if libs else None
    if home_abi is None and first is None:
        return skip(_("NNAL not sourced (see cann.nnal)"))
    torch_abi = None if ctx.engine.error else ctx.engine.torch_cxx11_abi
    if torch_abi is None:
        if home_abi is not None and first is not None and first[1] != home_abi:
            return warn(
                _(
                    "ATB_HOME_PATH={home} is the cxx_abi_{abi} build but LD_LIBRARY_PATH finds libatb.so first in "
                    "{first} (cxx_abi_{first_abi}): NNAL's set_env.sh was sourced for both ABIs"
                ).format(home=home, abi=home_abi, first=first[0], first_abi=first[1]),
                _(
                    "in a new shell, source {root}/set_env.sh once, with --cxx_abi= the value of "
                    "`python -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))'` in the engine's "
                    "environment"
                ).format(root=atb_root),
            )
        return skip(_("the engine interpreter did not report torch's C++ ABI"))
    torch = ctx.engine.packages.get("torch") or ""
    wrong = []
    if home_abi is not None and home_abi != torch_abi:
        wrong.append(_("ATB_HOME_PATH={home} is the cxx_abi_{abi} build").format(home=home, abi=home_abi))
    if first is not None and first[1] != torch_abi:
        wrong.append(
            _("LD_LIBRARY_PATH finds libatb.so first in {first} (cxx_abi_{abi})").format(first=first[0], abi=first[1])
        )
    if wrong:
        # set_env.sh picks the ABI from whatever `python3` is on PATH when it is sourced, which is
        # not always the engine's interpreter; sourcing it again only prepends, so start afresh.
        return error(
            _(
                "torch {torch} is built with _GLIBCXX_USE_CXX11_ABI={abi}, but {wrong}: torch_npu's ATB operators "
                "fail to load (undefined symbol)"
            ).format(torch=torch, abi=torch_abi, wrong=_("; ").join(wrong)),
            _(
                "in a new shell (the other build's directories stay on LD_LIBRARY_PATH otherwise): source "
                "{root}/set_env.sh --cxx_abi={abi}"
            ).format(root=atb_root, abi=torch_abi),
        )
    other = [e for e, abi in libs if abi != torch_abi]
    note = _("; the cxx_abi_{abi} directories after it are shadowed").format(abi=1 - torch_abi) if other else ""
    return ok(
        _("ATB cxx_abi_{abi} matches torch {torch} (_GLIBCXX_USE_CXX11_ABI={abi})").format(abi=torch_abi, torch=torch)
        + note
    )


# -- driver -------------------------------------------------------------------------------------


@check("driver.version", "driver", N_("NPU driver installed; version from driver/version.info"))
def check_driver(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    d = ctx.driver
    if d is None and unrecorded(ctx):
        table = ctx.npu_smi.table
        if table is not None and table.driver_version:
            return ok(
                _("driver {version} (npu-smi's version line; version.info not recorded)").format(
                    version=table.driver_version
                )
            )
        return skip(_("driver version.info not recorded"))
    if d is None:
        if ctx.container:
            return error(
                _("driver version.info not visible in this container"),
                "docker run ... -v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info "
                "-v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
            )
        return error(
            _("NPU driver not installed: no {prefix}/driver/version.info").format(prefix=ctx.driver_prefix),
            _(
                "install the driver package (Ascend-hdk-<chip>-npu-driver_<version>_linux-<arch>.run --full), then reboot"
            ),
        )
    if d.bad_version is not None:
        bad = _("{path} holds no version but {text}").format(path=d.path, text=quoted(d.bad_version))
        return warn(bad, _("reinstall the NPU driver package"))
    if not d.version:
        return warn(_("{path} has no Version= line").format(path=d.path), _("reinstall the NPU driver package"))
    inner = f" ({d.innerversion})" if d.innerversion else ""
    return ok(_("driver {version}").format(version=d.version) + inner)


@check("driver.firmware", "driver", N_("Firmware version within the range the driver accepts"))
def check_firmware(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    fw, d = ctx.firmware, ctx.driver
    if fw is None and unrecorded(ctx):
        return skip(_("firmware version.info not recorded"))
    if fw is None:
        if ctx.container:
            return skip(_("firmware files are not mounted into containers; run doctor on the host to check them"))
        return warn(
            _("firmware version.info not found (/usr/local/Ascend/firmware/version.info)"),
            _("install the firmware package (Ascend-hdk-<chip>-npu-firmware_<version>.run --full) matching the driver"),
        )
    if not fw.version:
        # Without this, a file with no usable Version= line read as "ok firmware None".
        what = (
            _("{path} holds no version but {text}").format(path=fw.path, text=quoted(fw.bad_version))
            if fw.bad_version
            else _("{path} has no Version= line").format(path=fw.path)
        )
        return warn(
            what,
            _(
                "reinstall the firmware package (Ascend-hdk-<chip>-npu-firmware_<version>.run --full) matching the "
                "driver"
            ),
        )
    inside = firmware_in_range(fw.version, d.compatible_fw if d else None)
    if inside is False and d is not None and d.compatible_fw:
        lo, hi = d.compatible_fw
        return error(
            _("firmware {firmware} is outside the range driver {driver} accepts [{low}, {high}]").format(
                firmware=fw.version, driver=d.version, low=lo, high=hi
            ),
            _("install the firmware package released with driver {driver} (Ascend-hdk-<chip>-npu-firmware)").format(
                driver=d.version
            ),
        )
    note = (
        _(" (driver accepts {low}-{high})").format(low=d.compatible_fw[0], high=d.compatible_fw[1])
        if inside and d and d.compatible_fw
        else ""
    )
    return ok(_("firmware {version}").format(version=fw.version) + note)


@check("driver.pairing", "driver", N_("Driver and CANN toolkit are a compatible pair"))
def check_pairing(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    tk, d = ctx.toolkit, ctx.driver
    table = ctx.npu_smi.table if d is None and unrecorded(ctx) else None
    if table is not None and table.driver_version and tk is not None and tk.version:
        # Without version.info there are no compatibility codes: Huawei's table decides.
        verdict = ctx.matrix.driver_compatible(table.driver_version, tk.version)
        if verdict:
            return ok(
                _("Huawei's compatibility table lists driver {driver} for CANN {cann}").format(
                    driver=table.driver_version, cann=tk.version
                )
            )
        if verdict is False:
            return error(
                _("Huawei's compatibility table marks driver {driver} incompatible with CANN {cann}").format(
                    driver=table.driver_version, cann=tk.version
                ),
                _(
                    "install a driver (HDK) release the table lists for this CANN version, "
                    "or a CANN release for the driver"
                ),
            )
        return skip(_("driver version.info (its compatibility codes) not recorded"))
    if tk is None or d is None or not tk.version or not d.version:
        return skip(_("needs both the driver and the CANN version"))
    p = pair(tk, d, ctx.matrix.driver_compatible(d.version, tk.version))
    if p.verdict == "ok":
        return ok(p.reason)
    fix = "install a driver (HDK) release listed for this CANN version in Huawei's compatibility table, or the CANN release that matches the driver"
    if p.verdict == "mismatch":
        return error(p.reason, fix)
    return warn(p.reason + "; the pairing is unverified", fix)


# -- environment --------------------------------------------------------------------------------


def _ld(ctx: Context):
    tk = ctx.toolkit
    homes = (tk.home, tk.real_home) if tk else ()
    return analyze(ctx.host, ctx.host.env.get("LD_LIBRARY_PATH"), homes, ctx.driver_prefix)


@check("env.ld_order", "env", N_("LD_LIBRARY_PATH puts the Ascend lib64 before /usr/lib64 and /lib64"))
def check_ld_order(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    if not ctx.env_known:
        return skip(_("environment not recorded"))
    tk = ctx.toolkit
    if tk is None:
        return skip(_("no toolkit found"))
    ld = _ld(ctx)
    if ld.toolkit_lib is None:
        return error(
            _("{home}/lib64 is not on LD_LIBRARY_PATH").format(home=tk.home),
            f"source {tk.set_env or default_set_env(ctx.host)}",
        )
    if ld.shadowing:
        system = set(SYSTEM_DIRS)
        ascend = [e for e in ld.entries if e and posixpath.normpath(e) not in system]
        rest = [e for e in ld.entries if e and posixpath.normpath(e) in system]
        value = ":".join(ascend + rest)
        if unrecorded(ctx):
            # A report does not show the directory's files: a warning, since a working machine
            # (vllm-ascend issue 629) served with /usr/lib64 first.
            return warn(
                _(
                    "{first} comes before {lib} in LD_LIBRARY_PATH: a libstdc++.so.6 there would shadow the one "
                    "CANN needs (the report does not show whether it holds one)"
                ).format(first=", ".join(ld.shadowing), lib=ld.entries[ld.toolkit_lib]),
                f"export LD_LIBRARY_PATH={shlex.quote(value)}",
            )
        return error(
            _(
                "{first} comes before {lib} in LD_LIBRARY_PATH: the system libstdc++.so.6 shadows the one CANN needs"
            ).format(first=", ".join(ld.shadowing), lib=ld.entries[ld.toolkit_lib]),
            f"export LD_LIBRARY_PATH={shlex.quote(value)}",
        )
    return ok(
        _("Ascend libraries come first in LD_LIBRARY_PATH ({entry} at position {position})").format(
            entry=ld.entries[ld.toolkit_lib], position=ld.toolkit_lib + 1
        )
    )


@check(
    "env.ld_driver", "env", N_("The driver's lib64/common and lib64/driver are on LD_LIBRARY_PATH (libascend_hal.so)")
)
def check_ld_driver(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    if not ctx.env_known:
        return skip(_("environment not recorded"))
    prefix = ctx.driver_prefix
    hal = f"{prefix}/driver/lib64/driver/libascend_hal.so"
    if not paths.exists(ctx.host, hal) and not unrecorded(ctx):
        fix = (
            "docker run ... -v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/"
            if ctx.container
            else "reinstall the NPU driver package"
        )
        return error(f"{hal} not found: torch_npu cannot reach the driver", fix)
    ld = _ld(ctx)
    if ld.driver_missing:
        wanted = ":".join(f"{prefix}/{d}" for d in DRIVER_DIRS)
        return error(
            _("driver libraries missing from LD_LIBRARY_PATH: {paths}").format(paths=", ".join(ld.driver_missing)),
            f"export LD_LIBRARY_PATH={wanted}:$LD_LIBRARY_PATH",
        )
    return ok(
        _(
            "driver lib64/common and lib64/driver are on LD_LIBRARY_PATH ({prefix}/driver): libascend_hal.so resolves"
        ).format(prefix=prefix)
    )


@check("env.ld_dead", "env", N_("No LD_LIBRARY_PATH entry points at a missing directory"))
def check_ld_dead(ctx: Context) -> Outcome:
    if not ctx.env_known:
        return skip(_("environment not recorded"))
    value = ctx.host.env.get("LD_LIBRARY_PATH", "")
    if not value:
        return ok(_("LD_LIBRARY_PATH is empty")) if ctx.platform != "ascend" else skip(_("LD_LIBRARY_PATH is empty"))
    if unrecorded(ctx):
        return skip(_("which directories exist was not recorded"))
    ld = _ld(ctx)
    if ld.dead:
        shown = ", ".join(e or "(empty entry = current directory)" for e in ld.dead[:3])
        more = f" and {len(ld.dead) - 3} more" if len(ld.dead) > 3 else ""
        alive = ":".join(e for e in ld.entries if e and e not in ld.dead)
        return warn(
            f"{len(ld.dead)} LD_LIBRARY_PATH entr{'y' if len(ld.dead) == 1 else 'ies'} do not exist: {shown}{more}",
            f"export LD_LIBRARY_PATH={shlex.quote(alive)}",
        )
    return ok(_("all {count} LD_LIBRARY_PATH entries exist").format(count=len(ld.entries)))


# -- engine stack -------------------------------------------------------------------------------
