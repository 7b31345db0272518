"""What an `ascendctl bundle` holds and where, and how to find the logs of one.

The archive is a recorded machine (engine.system.recorded): the files doctor read at their paths,
`.recorded/env`, `.recorded/commands/<key>.out` for every command doctor and the collectors ran,
so `doctor --root b.tar.gz` replays the machine and `triage b.tar.gz` reads its logs. Beside them:
`manifest.json` (each source: what was run or read, exit code, duration, bytes, status and why),
`doctor.json`, `env.json`, `versions.json`, `triage.json` and `run/` (the serve run). Where MindCluster
FaultDiag (`ascend-fd parse`) defines a place for a log, the log is there: plogs in `process_log/`,
the npu-smi / hccn_tool transcript in `environment_check/`, the kernel lines in `dmesg`, msnpureport's
export in `device_log/` (docs/bundle.md says what differs).

Cheap to import on purpose: `ascendctl triage` asks every path it is given whether it is a bundle,
and a plain log must not pay for the builder (engine.bundle.builder) and its imports.
"""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST = "manifest.json"
BUNDLE_SCHEMA = 1
RUN_DIR = "run"
# MindCluster FaultDiag's collection layout (docs/en/faultdiag/user_guide/03_collecting_logs.md): `ascend-fd
# parse -i DIR` finds these folders by name anywhere in DIR, and the host kernel log as a file named `dmesg`.
PROCESS_LOG_DIR = "process_log"
ENV_CHECK_DIR = "environment_check"
DEVICE_LOG_DIR = "device_log"
DMESG_FILE = "dmesg"
OUR_TOP = (PROCESS_LOG_DIR, ENV_CHECK_DIR, DEVICE_LOG_DIR, DMESG_FILE)  # never a machine path of the archive
# "after": taken once the job ran (FaultDiag reads npu_info_before.txt and npu_info_after.txt alike).
NPU_INFO_FILE = f"{ENV_CHECK_DIR}/npu_info_after.txt"


def bundle_dir(path: str | Path) -> Path | None:
    """The top of a bundle (an unpacked folder or a .tar.gz unpacked for this process), or None
    when `path` is not a bundle. A plain log costs a stat and tarfile's look at its first blocks."""
    import tarfile

    p = Path(path)
    try:
        maybe = p.is_dir() or (p.is_file() and tarfile.is_tarfile(p))
    except (OSError, EOFError):  # unreadable, or a gzip cut short: no bundle; the log reader says why
        maybe = False
    if not maybe:
        return None
    # Only for what may be a bundle: the recorded-machine module brings the host and runner modules.
    from engine.system.recorded import RECORD_DIR, recorded_root

    top = recorded_root(p)  # a folder as it is, an archive unpacked once
    return top if (top / MANIFEST).is_file() and (top / RECORD_DIR).is_dir() else None


def bundle_logs(top: Path) -> list[str]:
    """The logs a bundle holds (the run's engine log, plogs), as paths to read: only files inside
    the bundle (an entry that leaves it, `../../etc/shadow` or `/etc/shadow`, or a link, is ignored)."""
    from engine.system.archive import inside, read_regular

    raw = read_regular(top / MANIFEST)
    try:
        manifest = json.loads(raw or b"")
    except ValueError:
        return []
    logs = manifest.get("logs", []) if isinstance(manifest, dict) else []
    if not isinstance(logs, list):
        return []
    kept = []
    for m in logs:
        if not isinstance(m, str) or m.startswith("/") or ".." in m.split("/"):
            continue
        p = top / m
        if p.is_file() and not p.is_symlink() and inside(top, p):
            kept.append(str(p))
    return kept


def device_ids(top: Path) -> dict:
    """The chips' ids (engine.devices.npu_smi.ChipIds) by logic id, from the `npu-smi info -m`
    answer of the bundle's npu-smi transcript; {} when it has none."""
    from engine.devices.npu_smi import parse_mapping
    from engine.system.archive import inside
    from engine.system.recorded import read_transcript

    info = top / NPU_INFO_FILE
    if not info.is_file() or info.is_symlink() or not inside(top, info):
        return {}
    try:
        text = info.read_text(errors="replace")
    except OSError:
        return {}
    answer = read_transcript(text).get("npu-smi_info_-m")
    return parse_mapping(answer) if answer else {}


def triage_inputs(top: Path) -> list[str]:
    """What triage reads of a bundle: its logs, and its npu-smi transcript (no log, but its
    `-t health` answers carry the NPUs' fault codes). Only regular files inside the bundle."""
    from engine.system.archive import inside

    out = bundle_logs(top)
    info = top / NPU_INFO_FILE
    if info.is_file() and not info.is_symlink() and inside(top, info):
        out.append(str(info))
    return out
