"""`ascendctl engine plan / download`: the bundled Ascend engine's install plan, and a wheelhouse of
it for a host without network (installed there with `./install.sh --wheelhouse DIR`)."""

from __future__ import annotations

from typing import List, Optional

import typer

from engine.i18n import _, shown

CANN_HELP = "CANN toolkit version of the target host (9.1.0, 8.3.RC2); a version without a set takes its line's."
CHIP_HELP = "Chip family of the target host: A2, A3, 310P or 950."
ARCH_HELP = "CPU architecture of the target host: aarch64 or x86_64."
INDEX_HELP = (
    "NAME=URL: a mirror for one package index of the plan (pytorch_cpu, ascend, ascend_variant); "
    "repeatable. Precedence: engines.yaml's default < ASCENDCTL_INDEX_<NAME> < this option."
)


def _build(cann: str, chip: str, arch: str, index: Optional[List[str]]):
    from engine.errors import BadInput
    from engine.stacks.plan import PlanError, build_plan, index_urls

    overrides = {}
    for item in index or []:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise BadInput(f"--index {item!r} is not NAME=URL", "e.g. --index ascend=https://mirror.example/pypi")
        overrides[name] = url
    try:
        return build_plan(cann, chip=chip, arch=arch, indexes=index_urls(overrides))
    except PlanError as exc:
        raise BadInput(exc.cause, exc.fix) from None


def _plan(
    cann: str = typer.Option(..., "--cann", help=CANN_HELP),
    chip: str = typer.Option("A2", "--chip", help=CHIP_HELP),
    arch: str = typer.Option("aarch64", "--arch", help=ARCH_HELP),
    index: Optional[List[str]] = typer.Option(None, "--index", help=INDEX_HELP),
) -> None:
    """The ordered pip steps that install the engine pinned for a CANN version, chip and architecture.

    The same plan ./install.sh runs on an Ascend host (where it reads the CANN version and the
    chip itself). Nothing is installed.
    """
    from ascendctl.output import get_output
    from engine.stacks.plan import render

    out = get_output()
    plan = _build(cann, chip, arch, index)
    for warning in plan.warnings:
        out.warn(shown(warning))
    out.emit(plan.to_json(), lambda console: console.print(render(plan), markup=False, highlight=False))


def _download(
    cann: str = typer.Option(..., "--cann", help=CANN_HELP),
    dest: str = typer.Option(
        ...,
        "--dest",
        help="Folder to fill (created; files already there are kept when its manifest vouches for them).",
    ),
    chip: str = typer.Option("A2", "--chip", help=CHIP_HELP),
    arch: str = typer.Option("aarch64", "--arch", help=ARCH_HELP),
    python: str = typer.Option("3.11", "--python", help="Python version (major.minor) of the target's environment."),
    glibc: Optional[str] = typer.Option(
        None,
        "--glibc",
        help="glibc of the target host (default: the oldest the set's wheels install on); "
        "a newer one lets newer wheels in.",
    ),
    only: Optional[List[str]] = typer.Option(
        None,
        "--only",
        help="Fetch only these steps (torch, vllm, vllm-ascend, triton-ascend, ascendctl); repeatable or "
        "comma-separated. install.sh takes only a whole wheelhouse.",
    ),
    index: Optional[List[str]] = typer.Option(None, "--index", help=INDEX_HELP),
) -> None:
    """Fetch every file of the install plan for another host into a folder (a wheelhouse).

    For an Ascend host without network: run this on any connected machine (any architecture), copy
    the folder over, and there run ./install.sh --wheelhouse DIR. Wheels are chosen for the target
    (architecture, Python, manylinux tags of its glibc); what a step compiles on the host (vLLM,
    source-only dependencies) comes as its source archive with the wheels its build needs. The
    folder gets a manifest: the plan, the target, every file with its sha256.

    Packages of Huawei's indexes come from there (--index for a mirror). When an index cannot be
    reached, its packages are listed as missing with where to get them, the rest is still fetched,
    and the exit code is 1. Run again to complete a folder: what it holds is kept where its manifest
    vouches for it (a changed or unlisted file is removed and fetched again).
    """
    from pathlib import Path

    from ascendctl.output import get_output
    from ascendctl.style import safe
    from engine.errors import BadInput, ProblemsFound
    from engine.stacks.download import check_dest, download_plan, summary
    from engine.stacks.pins import ascend_sets
    from engine.stacks.wheelhouse import Target
    from engine.versions import release_tuple, satisfies

    out = get_output()
    plan = _build(cann, chip, arch, index)
    for warning in plan.warnings:
        out.warn(shown(warning))
    if not __import__("re").fullmatch(r"3\.\d+", python):
        raise BadInput(
            _("--python {value} is not a major.minor version").format(value=repr(python)), _("e.g. --python 3.11")
        )
    if plan.python and satisfies(f"{python}.0", plan.python) is False:
        raise BadInput(
            _("Python {python} is outside vllm-ascend {release}'s range {range}").format(
                python=python, release=plan.vllm_ascend, range=plan.python
            ),
            _("choose a --python in that range"),
        )
    floor = plan.glibc or "2.17"
    glibc = glibc or floor
    if not __import__("re").fullmatch(r"2\.\d+", glibc) or release_tuple(glibc) < release_tuple(floor):
        raise BadInput(
            _("--glibc {glibc}: the set's wheels need glibc {floor} or newer").format(glibc=glibc, floor=floor),
            _("pass --glibc {floor} or newer").format(floor=floor),
        )
    try:
        check_dest(dest)  # before any download: never fail at the end over a bad --dest
    except ValueError as exc:
        raise BadInput(str(exc), _("give --dest a folder (new or an earlier wheelhouse) this user can write")) from None
    steps = [s.strip() for item in only or [] for s in item.split(",") if s.strip()]
    target = Target(arch=arch, python=python, glibc=glibc)
    out.info(
        _("wheelhouse for vllm-ascend {release} (CANN {cann}, {chip}, {arch}, Python {python})").format(
            release=plan.vllm_ascend, cann=plan.set_cann, chip=chip, arch=arch, python=python
        )
    )

    def progress(line: str) -> None:
        # steps, source archives, warnings and failures always; pip's own lines on a terminal
        if out.interactive or not line.startswith("   ") or "failed" in line:
            out.info(safe(line))

    try:
        manifest = download_plan(
            plan,
            target,
            Path(dest),
            only=steps or None,
            built_from_source=ascend_sets()[plan.set_cann].get("built_from_source", []),
            progress=progress,
        )
    except ValueError as exc:
        raise BadInput(str(exc), _("see the plan's steps: ascendctl engine plan --cann ...")) from None
    data = {**manifest.to_json(), "dest": str(Path(dest).resolve())}
    out.emit(data, lambda console: console.print(summary(manifest), markup=False, highlight=False, soft_wrap=True))
    failed = [s for s in manifest.steps if s.status == "failed"]
    if failed or manifest.missing:
        what = [_("step {step}").format(step=s.id) + (f" ({s.package})" if s.package else "") for s in failed]
        what += [m.requirement for m in manifest.missing]
        raise ProblemsFound(
            _("the wheelhouse is incomplete: {what}").format(what=", ".join(what)),
            _("fix what is named above (a mirror: --index NAME=URL) and run the same command again"),
        )
    if manifest.complete:
        out.info(
            safe(
                _("next: copy {dest} to the target host and there run ./install.sh --wheelhouse DIR").format(dest=dest)
            )
        )


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        name="engine",
        help="The bundled Ascend engine: its install plan, and a wheelhouse for hosts without network.",
        no_args_is_help=True,
    )
    group.command("plan")(_plan)
    group.command("download")(_download)
    app.add_typer(group, name="engine")
