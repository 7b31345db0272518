"""Run an install plan (engine/stacks/plan.py) with the interpreter of the engine's environment.

install.sh calls it through `python -m engine.stacks.pins ascend install`: each step prints its
number and title, and a step that fails names itself, pip's exit status, why the step exists
and the fix. Before the first step the host is checked for what the plan needs (Python range,
glibc for the wheels, the CANN environment for a source build), so a missing prerequisite is one
clear message instead of a compiler error ten minutes in.

    python -m engine.stacks.install --check-chip A3   (what the plan's last step runs)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from typing import Callable, Mapping, Sequence

from engine.stacks.plan import Plan, Step, requirement_name
from engine.versions import normalize, release_tuple, satisfies

Run = Callable[..., "subprocess.CompletedProcess[bytes]"]
CANN_ENV_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def _fail(cause: str, fix: str) -> int:
    print(f"install.sh: {cause}", file=sys.stderr)
    if fix:
        print(f"  fix: {fix}", file=sys.stderr)
    return 1


def preflight(plan: Plan, python: str, glibc: str | None, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(cause, fix) of the first prerequisite the host lacks, or None."""
    if plan.python and satisfies(python, plan.python) is False:
        return (
            f"Python {python} is outside vllm-ascend {plan.vllm_ascend}'s range {plan.python}",
            "recreate .venv with a Python in that range (rm -r .venv; PYTHON=python3.X ./install.sh)",
        )
    if plan.glibc and glibc and release_tuple(glibc) < release_tuple(plan.glibc):
        return (
            f"glibc {glibc} is older than {plan.glibc}, which the vllm-ascend {plan.vllm_ascend} wheels for "
            f"{plan.arch} need: pip would compile it from source instead",
            f"use the official vllm-ascend container image or a distribution with glibc >= {plan.glibc}",
        )
    if any(s.needs_cann_env for s in plan.steps) and not any(environ.get(v) for v in CANN_ENV_VARS):
        return (
            f"vllm-ascend {plan.vllm_ascend} is compiled on this host ({plan.chip}) and the CANN environment "
            "is not set",
            "source /usr/local/Ascend/ascend-toolkit/set_env.sh (and the NNAL set_env.sh), then run again",
        )
    return None


def pin_met(pin: str, have: str | None) -> bool:
    """Whether the installed version `have` meets `pin` (`name==X` exactly, a local `+cpu` label
    aside; other specifiers by release number)."""
    if not have:
        return False
    spec = pin[len(requirement_name(pin)) :].strip()
    if spec.startswith("==") and "," not in spec:
        return normalize(have.split("+", 1)[0]) == normalize(spec[2:].strip())
    return satisfies(have, spec) is True


def missing_pins(pins: Sequence[str]) -> list[str]:
    """Pins of the plan not installed at a matching version in this interpreter."""
    missing = []
    for pin in pins:
        try:
            have = version(requirement_name(pin))
        except PackageNotFoundError:
            have = None
        if not pin_met(pin, have):
            missing.append(pin)
    return missing


def built_device_type() -> str | None:
    """`__device_type__` of the installed vllm_ascend/_build_info.py (read, not imported: importing
    vllm_ascend loads torch_npu)."""
    spec = find_spec("vllm_ascend")
    for where in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = open(os.path.join(where, "_build_info.py"), encoding="utf-8").read()
        except OSError:
            continue
        m = re.search(r"""__device_type__\s*=\s*['"]([^'"]+)['"]""", text)
        return m.group(1) if m else None
    return None


def run_step(
    step: Step, python: str, run: Run, environ: Mapping[str, str], plan: Plan, wheelhouse: str | None = None
) -> int:
    if step.kind == "check":
        have = built_device_type()
        if plan.device_type and have and have != plan.device_type:
            print(f"   vllm-ascend is built for {have}, this host is {plan.chip} ({plan.device_type})", file=sys.stderr)
            return 1
        return 0
    env = {**environ, **dict(step.env)}
    if wheelhouse:
        from engine.stacks.wheelhouse import offline_args

        args = offline_args(step, wheelhouse)
    else:
        args = step.pip_args()
    return run([python, "-m", "pip", "--disable-pip-version-check", *args], env=env).returncode


def run_plan(
    plan: Plan,
    python: str = sys.executable,
    run: Run = subprocess.run,
    environ: Mapping[str, str] | None = None,
    glibc: str | None = None,
    force: bool = False,
    wheelhouse: str | None = None,
) -> int:
    """0 when every step succeeded (or the pins were already installed), 1 on the first failure.
    With `wheelhouse` (a folder engine/stacks/download.py filled) every step installs from it
    alone: no index is asked."""
    environ = dict(os.environ if environ is None else environ)
    for w in plan.warnings:
        print(f"install.sh: warning: {w}", file=sys.stderr)
    py = ".".join(str(x) for x in sys.version_info[:3]) if python == sys.executable else ""
    if problem := preflight(plan, py, glibc, environ):
        return _fail(*problem)
    if not force and python == sys.executable and not missing_pins(plan.pins):
        _say(f"engine already installed: vllm-ascend {plan.vllm_ascend}, vLLM {plan.vllm}")
        return 0
    n = len(plan.steps)
    for i, step in enumerate(plan.steps, 1):
        _say(f"[{i}/{n}] {step.title}")
        rc = run_step(step, python, run, environ, plan, wheelhouse)
        if rc != 0:
            what = "the check failed" if step.kind == "check" else f"pip exited {rc}"
            fix = step.fix
            if wheelhouse and step.kind == "install":
                fix = (
                    f"where pip found no file: the wheelhouse lacks it; download again and copy it into {wheelhouse}"
                    + (f"; else {fix}" if fix else "")
                )
            return _fail(
                f"step {i}/{n} ({step.title}) failed: {what}"
                + (f"; it is there because {step.why}" if step.why else ""),
                fix or "read pip's message above; the whole plan: python -m engine.stacks.pins ascend plan",
            )
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--check-chip":
        have = built_device_type()
        print(have or "unknown")
        return 0 if have in (None, argv[1]) else 1
    print("usage: python -m engine.stacks.install --check-chip DEVICE_TYPE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
