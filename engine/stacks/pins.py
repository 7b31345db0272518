"""Print the pinned engine set for a platform, for install.sh (which must not parse YAML in bash).

    python -m engine.stacks.pins cpu requirements      -> one requirement per line
    python -m engine.stacks.pins cpu remove            -> one package per line
    python -m engine.stacks.pins ascend requirements   -> the set matching the host's CANN toolkit
    python -m engine.stacks.pins ascend requirements --cann 8.5.0   (choose the CANN version)
    python -m engine.stacks.pins ascend requirements --root DIR     (a recorded machine)
    python -m engine.stacks.pins ascend plan [--cann V] [--chip A2|A3|310P|950] [--arch aarch64|x86_64] [--json]
    python -m engine.stacks.pins ascend install [same options] [--force]   (runs the plan; install.sh)
    python -m engine.stacks.pins ascend install --wheelhouse DIR  (the plan a wheelhouse holds, no network)

`--index NAME=URL` (repeatable) replaces a package index of the plan; so does the environment
variable ASCENDCTL_INDEX_<NAME> (NAME: PYTORCH_CPU, ASCEND, ASCEND_VARIANT), the flag winning.
Without --chip / --arch the chip npu-smi reports and this machine's architecture are used.

The `ascend` entry holds one set per CANN version (`by_cann`); its shared fields (build_env,
check_import, ...) apply to every set. A CANN version without a set of its own takes the set of
its release line (9.1.1 -> 9.1.0) with a warning on stderr. Exit 1 when no set matches the CANN
found, 2 on bad usage.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from engine.data import load_yaml
from engine.versions import cann_release

# `ascend install` exits with this when it has no plan for the host (install.sh then goes on
# without an engine, as it does on a machine without CANN).
NO_PLAN = 3


def engine_sets() -> dict[str, Any]:
    return load_yaml("engine.stacks", "engines.yaml")


def ascend_sets() -> dict[str, dict[str, Any]]:
    """CANN release (canonical spelling) -> its pinned set, shared fields merged in."""
    entry = engine_sets().get("ascend") or {}
    shared = {k: v for k, v in entry.items() if k != "by_cann"}
    return {
        cann_release(str(cann)) or str(cann): {**shared, **{k: v for k, v in (pinned or {}).items()}, "cann": str(cann)}
        for cann, pinned in (entry.get("by_cann") or {}).items()
    }


def ascend_set(cann_version: str | None) -> dict[str, Any] | None:
    """The pinned set for this CANN version (`8.3.rc2` and `8.3.RC2` are the same), or None."""
    key = cann_release(cann_version)
    return ascend_sets().get(key) if key else None


def _detect_cann(root: str | None) -> str | None:
    from engine.system.cann import find_toolkit
    from engine.system.host import Host
    from engine.system.recorded import recorded_host

    host = recorded_host(root)[0] if root else Host()
    toolkit = find_toolkit(host)
    return toolkit.version if toolkit else None


def _detect_chip(root: str | None) -> str | None:
    """The chip family (A2, A3, 310P, 950) of the names in `npu-smi info`, or None when it cannot
    tell. The table itself is parsed in engine.devices, a layer stacks does not import: here each
    cell of the output is matched against the matrix's chip-name patterns, which is all it needs."""
    import re

    from engine.errors import Unreachable
    from engine.stacks.matrix import load_matrix
    from engine.system.host import Host
    from engine.system.recorded import recorded_host

    host = recorded_host(root)[0] if root else Host()
    try:
        text = host.runner.run(["npu-smi", "info"], timeout=20).stdout
    except Unreachable:
        return None
    matrix = load_matrix()
    families = set()
    for cell in re.split(r"[|\n]", text):
        words = cell.split()
        if len(words) in (1, 2) and (chip := matrix.chip(words[-1])) is not None and chip.supported:
            families.add(chip.family)
    return families.pop() if len(families) == 1 else None


def _flag(argv: list[str], name: str) -> tuple[list[str], bool]:
    return [a for a in argv if a != name], name in argv


def _indexes(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    found: dict[str, str] = {}
    while "--index" in argv:
        argv, value = _option(argv, "--index")
        name, sep, url = (value or "").partition("=")
        if not sep or not name or not url:
            raise ValueError("--index needs NAME=URL")
        found[name] = url
    return argv, found


def _plan(key: str, cann: str, root: str | None, chip: str | None, arch: str | None, opts: dict) -> int:
    import json
    import platform as _platform

    from engine.stacks.install import run_plan
    from engine.stacks.plan import PlanError, build_plan, index_urls, render

    notes = []
    if chip is None:
        try:
            chip = _detect_chip(root)
        except Exception:  # an unreadable npu-smi answer: plan for A2 and say so
            chip = None
        if chip is None:
            chip = "A2"
            notes.append("pins: npu-smi did not tell the chip; planning for A2 (pass --chip A3|310P|950 otherwise)")
    arch = arch or _platform.machine()
    try:
        plan = build_plan(cann, chip=chip, arch=arch, indexes=index_urls(opts["indexes"]))
    except PlanError as exc:
        print(f"pins: {exc.cause}", file=sys.stderr)
        print(f"  fix: {exc.fix}", file=sys.stderr)
        return NO_PLAN if key == "install" else 1
    for note in notes:
        print(note, file=sys.stderr)
    if key == "install":
        from engine.system.host import Host
        from engine.system.libc import glibc_version

        return run_plan(plan, glibc=glibc_version(Host()), force=opts["force"])
    print(json.dumps(plan.to_json(), indent=2) if opts["json"] else render(plan))
    return 0


def _install_wheelhouse(
    folder: str, root: str | None, cann: str | None, chip: str | None, force: bool, run: Any = None
) -> int:
    """Install the plan of a wheelhouse (engine/stacks/download.py made it) with no index: its
    target, its files' checksums and the host's CANN checked first, every problem named."""
    import platform as _platform

    from engine.stacks.install import run_plan
    from engine.stacks.plan import PlanError, resolve_cann
    from engine.stacks.wheelhouse import WheelhouseError, content_problems, host_problems, plan_of, read_manifest
    from engine.system.host import Host
    from engine.system.libc import glibc_version

    def fail(problems: list[tuple[str, str]]) -> int:
        for cause, fix in problems:
            print(f"install.sh: {cause}", file=sys.stderr)
            print(f"  fix: {fix}", file=sys.stderr)
        return 1

    try:
        manifest = read_manifest(folder)
        plan = plan_of(manifest)
    except (WheelhouseError, PlanError) as exc:
        return fail([(exc.cause, exc.fix)])
    glibc = glibc_version(Host())
    python = ".".join(str(x) for x in sys.version_info[:3])
    problems = host_problems(manifest.target, _platform.machine(), python, glibc)
    if chip and chip != plan.chip:
        problems.append(
            (f"the wheelhouse is for {plan.chip}, --chip says {chip}", f"download again with --chip {chip}")
        )
    try:
        here = cann or _detect_cann(root)
        here_set = resolve_cann(here)[0] if here else None
    except Exception:  # no readable CANN tree here (a container build): the manifest decides
        here, here_set = None, None
    if here_set and here_set != plan.set_cann:
        problems.append(
            (
                f"the wheelhouse holds the set for CANN {plan.set_cann}, this host has CANN {here}",
                f"download again with --cann {here}",
            )
        )
    elif not here:
        print(f"pins: no CANN toolkit found; installing the wheelhouse's set for CANN {plan.set_cann}", file=sys.stderr)
    problems += content_problems(Path(folder), manifest)
    if problems:
        return fail(problems)
    print(
        f"==> installing from the wheelhouse {folder} (no network): vllm-ascend {plan.vllm_ascend}, {plan.chip}, "
        f"{plan.arch}, Python {manifest.target.python}",
        flush=True,
    )
    extra = {"run": run} if run is not None else {}
    return run_plan(plan, glibc=glibc, force=force, wheelhouse=str(Path(folder).resolve()), **extra)


def _option(argv: list[str], name: str) -> tuple[list[str], str | None]:
    if name in argv:
        i = argv.index(name)
        if i + 1 >= len(argv):
            raise ValueError(f"{name} needs a value")
        return argv[:i] + argv[i + 2 :], argv[i + 1]
    return argv, None


def main(argv: list[str]) -> int:
    try:
        argv, cann = _option(list(argv), "--cann")
        argv, root = _option(argv, "--root")
        argv, chip = _option(argv, "--chip")
        argv, arch = _option(argv, "--arch")
        argv, indexes = _indexes(argv)
        argv, as_json = _flag(argv, "--json")
        argv, force = _flag(argv, "--force")
        argv, wheelhouse = _option(argv, "--wheelhouse")
    except ValueError as exc:
        print(f"pins: {exc}", file=sys.stderr)
        return 2
    if len(argv) != 2:
        print(
            "usage: python -m engine.stacks.pins PLATFORM FIELD [--cann VERSION] [--root DIR]\n"
            "       python -m engine.stacks.pins ascend plan|install [--cann V] [--chip C] [--arch A] "
            "[--index NAME=URL] [--json] [--force]\n"
            "       python -m engine.stacks.pins ascend install --wheelhouse DIR [--force]",
            file=sys.stderr,
        )
        return 2
    platform, key = argv
    sets = engine_sets()
    if platform not in sets:
        print(f"no pinned engine for platform {platform!r} (known: {', '.join(sets)})", file=sys.stderr)
        return 2
    chosen = sets[platform]
    if wheelhouse and (platform, key) != ("ascend", "install"):
        print("pins: --wheelhouse goes with `ascend install`", file=sys.stderr)
        return 2
    if wheelhouse:
        return _install_wheelhouse(wheelhouse, root, cann, chip, force)
    if platform == "ascend":
        try:
            cann = cann or _detect_cann(root)
        except Exception as exc:  # a broken tree must not stop install.sh with a traceback
            print(f"pins: cannot read the CANN version: {exc}", file=sys.stderr)
            return NO_PLAN if key == "install" else 1
        if not cann:
            print("pins: no CANN toolkit found; install CANN first or pass --cann VERSION", file=sys.stderr)
            return NO_PLAN if key == "install" else 1
        if key in ("plan", "install"):
            return _plan(key, cann, root, chip, arch, {"indexes": indexes, "json": as_json, "force": force})
        from engine.stacks.plan import PlanError, resolve_cann

        try:
            set_cann, warning = resolve_cann(cann)
        except PlanError as exc:
            print(f"pins: {exc.cause}", file=sys.stderr)
            return 1
        if warning:
            print(f"pins: warning: {warning}", file=sys.stderr)
        chosen = ascend_set(set_cann) or {}
    value = chosen.get(key, [])
    for item in value if isinstance(value, list) else [value]:
        print(item)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
