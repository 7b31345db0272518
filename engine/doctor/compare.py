"""Version skew across hosts, from doctor's JSON reports (`ascendctl doctor --json` on each node,
or `doctor --cluster`).

    report = compare_reports([("node0.json", data0), ("node1.json", data1)])
    report.facts["table"]     # {"CANN": {"node0": "8.2.RC1", "node1": "8.3.RC2"}, ...}

Every node of one serving group must run the same stack: HCCL and vLLM's ranks do not check it
themselves, and a mismatch shows up as a hang or an init error far from its cause. The value most
hosts hold is taken as the reference, and each row names the hosts that differ from it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from engine.doctor.model import CheckResult, DoctorReport, Status
from engine.errors import BadInput


def _get(*path: str) -> Callable[[Mapping[str, Any]], Any]:
    def read(facts: Mapping[str, Any]) -> Any:
        value: Any = facts
        for key in path:
            if not isinstance(value, Mapping):
                return None
            value = value.get(key)
        return value

    return read


def _nic_field(key: str) -> Callable[[Mapping[str, Any]], Any]:
    """The NICs' values of one netcheck NIC record field (`tls_switch`, `fec`), from netcheck's NIC
    records inside a `--cluster` report, or from a `netcheck --json` report given to --compare."""

    def read(facts: Mapping[str, Any]) -> Any:
        net = facts.get("netcheck")
        nics = net.get("nics") if isinstance(net, Mapping) else facts.get("nics")
        if not nics:
            return None
        values = sorted({str(n.get(key)) for n in nics if isinstance(n, Mapping) and n.get(key) is not None})
        return ",".join(values) or None

    return read


# label, id, how to read it from a report's facts, the fix when hosts differ
FIELDS: tuple[tuple[str, str, Callable[[Mapping[str, Any]], Any], str], ...] = (
    ("CANN", "skew.cann", _get("cann", "version"), "install the same CANN toolkit version on every node"),
    ("driver", "skew.driver", _get("driver"), "install the same Ascend driver (HDK) on every node"),
    ("firmware", "skew.firmware", _get("firmware"), "flash the same firmware on every node"),
    ("Python", "skew.python", _get("engine", "python"), "build every node's engine from one image or one install"),
    ("torch", "skew.torch", _get("engine", "packages", "torch"), "pin one torch on every node"),
    ("torch_npu", "skew.torch_npu", _get("engine", "packages", "torch-npu"), "pin one torch_npu on every node"),
    ("vllm", "skew.vllm", _get("engine", "vllm"), "install the same vLLM on every node"),
    (
        "vllm-ascend",
        "skew.vllm_ascend",
        _get("engine", "packages", "vllm-ascend"),
        "install the same vllm-ascend on every node",
    ),
    (
        "NPU NIC TLS",
        "skew.tls",
        _nic_field("tls_switch"),
        "use one TLS setting on every NIC of every node: hccn_tool -i $i -tls -s enable 0",
    ),
    (
        "NPU NIC FEC",
        "skew.fec",
        _nic_field("fec"),
        "use RS-FEC on every NIC of every node and on their switch ports: hccn_tool -i $i -fec -s encoding rs",
    ),
)


def host_label(name: str, data: Mapping[str, Any]) -> str:
    facts = data.get("facts") if isinstance(data, Mapping) else None
    host = facts.get("host") if isinstance(facts, Mapping) else None
    return str(host) if host else name


def _validate(name: str, data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping) or not isinstance(data.get("facts"), Mapping) or "checks" not in data:
        raise BadInput(
            f"{name} is not a doctor report (no facts and checks)",
            "give files written by `ascendctl doctor --json > NODE.json` on each node",
        )
    return data


def compare_reports(reports: Sequence[tuple[str, Any]]) -> DoctorReport:
    """Compare reports given as (name, parsed JSON). BadInput when fewer than two or not doctor's."""
    if len(reports) < 2:
        raise BadInput("--compare needs at least two reports", "ascendctl doctor --compare node0.json node1.json")
    hosts: list[str] = []
    facts_by_host: dict[str, Mapping[str, Any]] = {}
    given: dict[str, list[str]] = {}  # host name -> the files that report it
    for name, data in reports:
        data = _validate(name, data)
        label = host_label(name, data)
        given.setdefault(label, []).append(name)
        if label in facts_by_host:  # two reports of one host name (copied trees): keep both apart
            label = f"{label} ({name})"
        hosts.append(label)
        facts_by_host[label] = data["facts"]
    table: dict[str, dict[str, Any]] = {}
    checks: list[CheckResult] = []
    twice = {h: names for h, names in given.items() if len(names) > 1}
    if twice:
        # One host given twice agrees with itself: "the same stack" would say nothing about the others.
        said = "; ".join(f"{h} in {', '.join(names)}" for h, names in twice.items())
        checks.append(
            CheckResult(
                "hosts.distinct",
                "skew",
                Status.WARN,
                f"one host reported more than once: {said}",
                "give one report per node (ascendctl doctor --json > NODE.json on each)",
            )
        )
    for label, cid, read, fix in FIELDS:
        values = {h: read(facts_by_host[h]) for h in hosts}
        values = {h: (None if v is None else str(v)) for h, v in values.items()}
        table[label] = values
        known = {h: v for h, v in values.items() if v is not None}
        if not known:
            checks.append(CheckResult(cid, "skew", Status.SKIP, f"{label} not in any report"))
            continue
        counts = Counter(known.values())
        unknown = [h for h in hosts if values[h] is None]
        if len(counts) == 1:
            value = next(iter(counts))
            if unknown:
                checks.append(
                    CheckResult(
                        cid,
                        "skew",
                        Status.WARN,
                        f"{label} {value} where known; unknown on {', '.join(unknown)}",
                        f"run doctor on {', '.join(unknown)} where it can read the {label} version",
                    )
                )
            else:
                checks.append(CheckResult(cid, "skew", Status.OK, f"{label} {value} on all {len(hosts)} hosts"))
            continue
        (ref, ref_n), (_, second_n) = counts.most_common(2)
        if ref_n == second_n:  # no majority: list every value with its hosts
            groups = [f"{v} on {', '.join(h for h in known if known[h] == v)}" for v in counts]
            summary = f"{label} differs: " + "; ".join(groups)
        else:
            odd = [f"{h} has {known[h]}" for h in known if known[h] != ref]
            summary = f"{label} differs: " + "; ".join(odd) + f" (the others: {ref})"
        checks.append(CheckResult(cid, "skew", Status.ERROR, summary, fix))
    errors = sum(c.status is Status.ERROR for c in checks)
    unknown = [c for c in checks if c.status is Status.WARN and c.id.startswith("skew.")]
    distinct = len(given)
    count = f"{len(hosts)} hosts" if distinct == len(hosts) else f"{len(hosts)} reports of {distinct} host(s)"
    if errors:
        headline = f"{count}; {errors} version skew(s): the nodes cannot serve together"
    elif unknown:
        headline = f"{count}; the same stack where known, {len(unknown)} version(s) unknown on some hosts"
    else:
        headline = f"{count}; the same stack on every host"
    return DoctorReport(
        platform="cluster",
        headline=headline,
        root=", ".join(name for name, _ in reports),
        live=False,
        checks=tuple(checks),
        facts={"hosts": hosts, "table": table},
    )
