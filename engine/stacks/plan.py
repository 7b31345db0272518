"""The install plan of the Ascend engine: the ordered pip steps the official Dockerfiles and install
docs use for one pinned set (engines.yaml), a chip family and a CPU architecture.

    plan = build_plan("9.1.0", chip="A3", arch="aarch64")
    for step in plan.steps: print(step.shell())

Pure data: nothing here runs pip (engine/stacks/install.py does). Index URLs are settings: the
defaults of engines.yaml, replaced by `ASCENDCTL_INDEX_<NAME>` in the environment or by an
explicit override (`--index name=URL` on the command line), in that order of precedence.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from engine.i18n import N_, Msg, _, shown, spaced
from engine.stacks.pins import ascend_set, ascend_sets, engine_sets
from engine.versions import cann_key, cann_release, release_tuple

CHIPS = ("A2", "A3", "310P", "950")
ARCHES = ("aarch64", "x86_64")
INDEX_ENV_PREFIX = "ASCENDCTL_INDEX_"
# vllm-ascend's first release whose docs install non-A2 chips from the variant index.
VARIANT_INDEX_SINCE = "0.22.1rc1"


class PlanError(ValueError):
    """No plan for this request; `fix` says what to do instead."""

    def __init__(self, cause: str, fix: str) -> None:
        super().__init__(cause)
        self.cause, self.fix = cause, fix


@dataclass(frozen=True)
class Package:
    """One requirement of a step and where it comes from: `pypi`, or the name of an index
    (`ascend`: Huawei's Ascend index only; `pytorch_cpu`: the CPU build of torch)."""

    requirement: str
    source: str = "pypi"


@dataclass(frozen=True)
class Step:
    """One command of the plan. `kind`: install (pip install), remove (pip uninstall -y) or check
    (the built vllm-ascend targets the chip). `why` says what the step is for, `fix` what to do
    when it fails."""

    id: str
    title: str
    kind: str
    packages: tuple[Package, ...] = ()
    options: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    why: str = ""
    fix: str = ""
    needs_cann_env: bool = False

    def pip_args(self) -> list[str]:
        """The arguments after `python -m pip`."""
        names = [p.requirement for p in self.packages]
        if self.kind == "remove":
            return ["uninstall", "-y", *names]
        if self.kind == "install":
            return ["install", *self.options, *names]
        return []

    def shell(self, python: str = "python") -> str:
        if self.kind == "check":
            return " ".join([python, "-m", "engine.stacks.install", "--check-chip", *self.options])
        env = " ".join(f"{k}={v}" for k, v in self.env)
        return (env + " " if env else "") + " ".join([python, "-m", "pip", *(_quote(a) for a in self.pip_args())])


@dataclass(frozen=True)
class Plan:
    cann: str
    set_cann: str
    chip: str
    arch: str
    vllm_ascend: str
    vllm: str
    python: str
    indexes: dict[str, str]
    steps: tuple[Step, ...]
    glibc: str | None  # the oldest glibc the plan's wheels install on
    device_type: str | None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    pins: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["steps"] = [
            {**asdict(s), "env": dict(s.env), "command": s.shell(), "n": i} for i, s in enumerate(self.steps, 1)
        ]
        return data

    def from_index(self, source: str) -> list[str]:
        """Requirements of the plan that only `source` (an index name) serves."""
        return list(dict.fromkeys(p.requirement for s in self.steps for p in s.packages if p.source == source))


def _quote(arg: str) -> str:
    return f"'{arg}'" if re.search(r"[<>*!; ]", arg) else arg


def requirement_name(req: str) -> str:
    return re.split(r"[<>=!~;@\[ ]", req, maxsplit=1)[0].lower().replace("_", "-")


def index_urls(overrides: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Index name -> URL: engines.yaml's default, then ASCENDCTL_INDEX_<NAME>, then `overrides`."""
    environ = os.environ if environ is None else environ
    urls = {str(k): str(v) for k, v in (engine_sets().get("ascend", {}).get("indexes") or {}).items()}
    for name in list(urls):
        if value := environ.get(INDEX_ENV_PREFIX + name.upper()):
            urls[name] = value
    for name, url in (overrides or {}).items():
        if name not in urls:
            raise PlanError(
                _("unknown index {name}").format(name=repr(name)),
                _("name one of: {names}").format(names=", ".join(urls)),
            )
        urls[name] = url
    return urls


def resolve_cann(cann: str) -> tuple[str, str | None]:
    """The CANN whose set serves `cann`, and a warning when it is not `cann` itself: a version of
    a known line (9.1.1, 8.5.2) takes the newest set of its line at or below it."""
    want = cann_release(cann)
    if not want:
        raise PlanError(
            _("{cann} is not a CANN version").format(cann=repr(cann)), _("pass a version such as 9.1.0 or 8.3.RC2")
        )
    if ascend_set(want):
        return want, None
    line = want.split(".")[:2]
    below = [c for c in ascend_sets() if c.split(".")[:2] == line and cann_key(c) <= cann_key(want)]
    if below:
        best = max(below, key=cann_key)
        return best, Msg(
            "CANN {want} has no set of its own; using the set for CANN {best} (same release line: "
            "Huawei lists the line's toolkit and operator packages as compatible)",
            want=want,
            best=best,
        )
    known = ", ".join(ascend_sets())
    raise PlanError(
        _("no pinned Ascend set for CANN {want} (sets exist for {known})").format(want=want, known=known),
        _("install one of those CANN versions, or pass --cann VERSION to choose a set"),
    )


def build_plan(
    cann: str,
    chip: str = "A2",
    arch: str = "aarch64",
    indexes: Mapping[str, str] | None = None,
) -> Plan:
    """The ordered steps that install the set pinned for `cann` on `chip` / `arch`."""
    from engine.stacks.matrix import load_matrix

    if chip not in CHIPS:
        raise PlanError(
            _("unknown chip family {chip}").format(chip=repr(chip)),
            _("use one of {names}").format(names=", ".join(CHIPS)),
        )
    if arch not in ARCHES:
        raise PlanError(
            _("no Ascend engine for architecture {arch}").format(arch=repr(arch)),
            _("use one of {names}").format(names=", ".join(ARCHES)),
        )
    set_cann, warning = resolve_cann(cann)
    pinned = ascend_set(set_cann) or {}
    shared = engine_sets()["ascend"]
    urls = dict(indexes) if indexes is not None else index_urls()
    va, vllm = str(pinned["vllm_ascend"]), str(pinned["vllm"])
    row = load_matrix().release(va)
    if row is not None and chip not in row.hardware:
        raise PlanError(
            _("vllm-ascend {version} (the set for CANN {cann}) does not support {chip}").format(
                version=va, cann=set_cann, chip=chip
            ),
            _("install a CANN version whose vllm-ascend release lists {chip} (see engine/stacks/matrix.yaml)").format(
                chip=chip
            ),
        )
    reqs = [str(r) for r in pinned["requirements"]]
    on_ascend = {requirement_name(n) for n in pinned.get("ascend_index", [])}
    torch_reqs = [str(r) for r in pinned.get("torch", [])]
    torch_names = {requirement_name(r) for r in torch_reqs}
    cpu = arch == "x86_64"
    cpu_index = ["--extra-index-url", urls["pytorch_cpu"]] if cpu else []
    torch_src = "pytorch_cpu" if cpu else "pypi"
    glibc = str((pinned.get("glibc") or {}).get(arch, "")) or None
    va_wheel = pinned.get("vllm_ascend_wheel", True) is not False
    from_variant = chip != "A2" and pinned.get("chip_wheels") == "variant"
    source_build = not va_wheel or (chip != "A2" and not from_variant)
    soc = str((shared.get("soc_version") or {}).get(chip, ""))
    steps: list[Step] = []
    notes: list[str] = []

    steps.append(
        Step(
            "torch",
            Msg("torch {version} (CPU build, from the PyTorch CPU index)", version=torch_reqs[0].split("==")[-1])
            if cpu
            else f"torch {torch_reqs[0].split('==')[-1]}",
            "install",
            tuple(Package(r, torch_src) for r in torch_reqs),
            tuple(cpu_index),
            why="torch_npu runs on this exact torch; on x86_64 the PyPI torch is the CUDA build",
            fix="check the network or the index settings (--index pytorch_cpu=URL for a mirror)",
        )
    )
    steps.append(
        Step(
            "vllm",
            Msg("vLLM {version} built from its source archive (VLLM_TARGET_DEVICE=empty)", version=vllm),
            "install",
            (Package(f"vllm=={vllm}"),),
            ("--no-binary", "vllm", *cpu_index),
            env=(("VLLM_TARGET_DEVICE", "empty"),),
            why="the vLLM wheel is built for CUDA; the empty target installs vLLM's Python side only, "
            "in its own step because vLLM and vllm-ascend pin some shared packages differently",
            fix="a C compiler and cmake must be on PATH (apt-get install gcc g++ cmake); read pip's error above",
        )
    )
    steps.append(
        Step(
            "remove-triton",
            Msg("remove the CUDA triton"),
            "remove",
            (Package("triton"),),
            why="torch or vLLM may pull the CUDA triton, which shadows triton-ascend",
        )
    )
    va_options: list[str] = []
    if from_variant:
        va_options += ["--extra-index-url", urls["ascend_variant"]]
    if on_ascend or from_variant:
        va_options += ["--extra-index-url", urls["ascend"]]
    va_options += cpu_index
    env: list[tuple[str, str]] = []
    if source_build:
        va_options = ["--no-binary", "vllm-ascend", *va_options]
        env.append(("SOC_VERSION", soc))
        if not va_wheel:
            notes.append(
                Msg(
                    "PyPI holds only the source archive of vllm-ascend {version}: it is built here (CANN toolchain)",
                    version=va,
                )
            )
        else:
            notes.append(
                Msg(
                    "the PyPI wheel of vllm-ascend {version} is built for A2: it is built here for {chip} ({soc})",
                    version=va,
                    chip=chip,
                    soc=soc,
                )
            )
    elif from_variant:
        notes.append(
            Msg(
                "vllm-ascend {version} for {chip} comes from the variant index (the PyPI wheel is built for A2)",
                version=va,
                chip=chip,
            )
        )
    rest = [r for r in reqs if requirement_name(r) not in torch_names | {"vllm", "torch"}]
    packages = []
    for r in rest:
        if requirement_name(r) == "vllm-ascend" and from_variant:
            packages.append(Package(r, "ascend_variant"))
        else:
            packages.append(Package(r, "ascend" if requirement_name(r) in on_ascend else "pypi"))
    packages += [Package(r, torch_src) for r in torch_reqs]  # keeps torch where step 1 put it
    steps.append(
        Step(
            "vllm-ascend",
            Msg("vllm-ascend {version} with torch_npu and the set's pins (built for {chip})", version=va, chip=chip)
            if source_build
            else Msg("vllm-ascend {version} with torch_npu and the set's pins", version=va),
            "install",
            tuple(packages),
            tuple(va_options),
            env=tuple(env),
            why="the plugin and the packages its release was tested with",
            fix=(
                "source the CANN environment first (source /usr/local/Ascend/ascend-toolkit/set_env.sh) and "
                "have gcc, g++ and cmake; or use the official container image"
                if source_build
                else "check the network or the index settings (--index ascend=URL for a mirror)"
            ),
            needs_cann_env=source_build,
        )
    )
    triton = pinned.get("triton_ascend")
    removed = [Package("triton")] + ([Package("triton-ascend")] if triton or chip == "310P" else [])
    steps.append(
        Step(
            "remove-triton-again",
            Msg("remove triton-ascend and triton (310P supports neither)")
            if chip == "310P"
            else Msg("remove triton and triton-ascend, for a clean reinstall")
            if triton
            else Msg("remove triton"),
            "remove",
            tuple(removed),
            why="310P has no triton support"
            if chip == "310P"
            else "installing vllm-ascend can bring the CUDA triton back, and removing it breaks the files "
            "triton-ascend shares with it",
        )
    )
    if triton and chip != "310P":
        src = "ascend" if "triton-ascend" in on_ascend else "pypi"
        steps.append(
            Step(
                "triton-ascend",
                f"triton-ascend {triton}",
                "install",
                (Package(f"triton-ascend=={triton}", src),),
                ("--extra-index-url", urls["ascend"]) if src == "ascend" else (),
                why="the Triton backend vllm-ascend's kernels use",
                fix="check the network or the index settings (--index ascend=URL for a mirror)",
            )
        )
    device_type = str((shared.get("device_type") or {}).get(chip, "")) or None
    if release_tuple(va) >= (0, 13, 0):
        steps.append(
            Step(
                "check-chip",
                Msg("vllm-ascend is built for {chip}", chip=chip),
                "check",
                options=(device_type or "",),
                why="a wheel built for another chip fails its device-type check when the engine starts",
                fix=f"reinstall vllm-ascend built for {chip}: SOC_VERSION={soc} pip install --no-binary vllm-ascend "
                f"--force-reinstall vllm-ascend=={va} (with the CANN environment sourced)",
            )
        )
    else:
        device_type = None
    if compiled := [str(r) for r in pinned.get("built_from_source", [])]:
        notes.append(
            Msg(
                "PyPI has only source archives of {packages}: step 4 compiles them (gcc, g++)",
                packages=", ".join(compiled),
            )
        )
    if pinned.get("note"):
        notes.append(str(pinned["note"]))
    return Plan(
        cann=cann_release(cann) or cann,
        set_cann=set_cann,
        chip=chip,
        arch=arch,
        vllm_ascend=va,
        vllm=vllm,
        python=str(pinned.get("python", "")),
        indexes=urls,
        steps=tuple(steps),
        glibc=glibc,
        device_type=device_type,
        warnings=(warning,) if warning else (),
        notes=tuple(notes),
        pins=tuple(r for r in reqs if not (chip == "310P" and requirement_name(r) == "triton-ascend")),
    )


def build_device_types() -> dict[str, str]:
    """Chip family -> the `__device_type__` vllm-ascend's build writes for it (engines.yaml)."""
    return {str(k): str(v) for k, v in (engine_sets()["ascend"].get("device_type") or {}).items()}


def soc_versions() -> dict[str, str]:
    """Chip family -> the SOC_VERSION a source build of vllm-ascend takes (engines.yaml)."""
    return {str(k): str(v) for k, v in (engine_sets()["ascend"].get("soc_version") or {}).items()}


def render(plan: Plan) -> str:
    """The plan as an operator reads it: the set, what the host needs, then one command a step."""
    lines = [
        _(
            "Ascend engine for CANN {cann}: vllm-ascend {vllm_ascend} with vLLM {vllm} ({chip}, {arch}, Python {python})"
        ).format(
            cann=plan.cann,
            vllm_ascend=plan.vllm_ascend,
            vllm=plan.vllm,
            chip=plan.chip,
            arch=plan.arch,
            python=plan.python,
        )
    ]
    lines += [_label(N_("warning:")) + shown(w) for w in plan.warnings]
    needs = [_("glibc >= {glibc} (the wheels' manylinux tag)").format(glibc=plan.glibc)] if plan.glibc else []
    if any(s.needs_cann_env for s in plan.steps):
        needs.append(_("the CANN environment sourced and gcc, g++, cmake (vllm-ascend is compiled)"))
    if needs:
        lines.append(_label(N_("needs:")) + _("; ").join(needs))
    lines += [_label("note:") + shown(n) for n in plan.notes]
    for source in ("ascend", "ascend_variant"):
        if served := plan.from_index(source):
            lines.append(
                _("from the {source} index ({url}): {packages}").format(
                    source=source, url=plan.indexes[source], packages=", ".join(served)
                )
            )
    for i, step in enumerate(plan.steps, 1):
        lines.append(f"{i:>2}. {shown(step.title)}")
        lines.append(f"    {step.shell()}")
    return "\n".join(lines)


def _label(label: str) -> str:
    return spaced(_(label))


def package_source(package: str, version: str) -> str | None:
    """Where a pinned set gets `package==version`: "pypi", an index name ("ascend"), or None when
    no set pins that version (a build ascendctl cannot vouch for)."""
    want = requirement_name(package)
    for pinned in ascend_sets().values():
        on_ascend = {requirement_name(str(n)) for n in pinned.get("ascend_index", [])}
        pins = [str(r) for r in pinned.get("requirements", [])]
        if pinned.get("triton_ascend"):
            pins.append(f"triton-ascend=={pinned['triton_ascend']}")
        for req in pins:
            if requirement_name(req) == want and req.partition("==")[2] == version:
                return "ascend" if want in on_ascend else "pypi"
    return None


def pip_install_hint(package: str, version: str, extra: str = "") -> str | None:
    """`pip install package==version` with the index the sets get it from, or None when no set pins
    that version (then no command can promise it exists)."""
    source = package_source(package, version)
    if source is None:
        return None
    index = f" --extra-index-url {index_urls()[source]}" if source != "pypi" else ""
    return f"pip install {extra}{package}=={version}{index}"


def glibc_needed(cann: str | None, arch: str | None) -> tuple[str, str] | None:
    """(glibc, vllm-ascend release) of the set for this CANN on this architecture, or None."""
    if not cann or arch not in ARCHES:
        return None
    try:
        set_cann, _ = resolve_cann(cann)
    except PlanError:
        return None
    pinned = ascend_set(set_cann) or {}
    need = (pinned.get("glibc") or {}).get(arch)
    return (str(need), str(pinned.get("vllm_ascend"))) if need else None


def newest_set_for_glibc(glibc: str, arch: str) -> str | None:
    """The newest CANN whose set's wheels install on this glibc, or None."""
    fits = [
        c
        for c, p in ascend_sets().items()
        if release_tuple(str((p.get("glibc") or {}).get(arch, "99"))) <= release_tuple(glibc)
    ]
    return max(fits, key=cann_key, default=None)
