"""The `roles` of a prefill / decode layout (`nodes.mode: pd`) and the checks external-dp needs.

    nodes:
      mode: pd
      count: 2
      addresses: [192.0.2.10, 192.0.2.11]
      kv_connector: MooncakeConnectorV1
      roles:
        - {role: prefill, host: 0, devices: [0, 1, 2, 3, 4, 5, 6, 7], tensor_parallel_size: 8, port: 7100, kv_port: 36000}
        - {role: decode, host: 1, devices: [0, 1, 2, 3, 4, 5, 6, 7], tensor_parallel_size: 1, port: 7100, kv_port: 36200}

Each entry is one role's part on one host: `devices / tensor_parallel_size` API servers on ports
`port`, `port + 1`, ... The entries of a role with the same `dp_group` (default 0) form one
data-parallel group, its master on the first entry's host (the multi-node tutorial runs each
prefill host as its own group of 2 and both decode hosts as one group of 32). The
checks here need the whole section; single keys are checked by the schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from engine.profiles.schema import Locate, Nodes
    from engine.yamlfile import Problem

PREFILL, DECODE = "prefill", "decode"
ROLE_NAMES = (PREFILL, DECODE)
ROLE_KEYS = (
    "role",
    "host",
    "devices",
    "port",
    "tensor_parallel_size",
    "dp_group",
    "kv_port",
    "dp_rpc_port",
    "engine",
    "env",
)
# Engine keys a role may not change: they must be the same on both sides of the KV transfer, or
# they are the layout's own (the role says its TP).
SHARED_ENGINE_KEYS = ("dtype", "kv_cache_dtype", "block_size", "quantization", "tensor_parallel_size")


@dataclass(frozen=True)
class Role:
    """One entry of nodes.roles: a role's instances on one host."""

    role: str
    host: int
    devices: tuple[int, ...]
    port: int
    tensor_parallel_size: int = 1
    kv_port: int | None = None
    dp_rpc_port: int | None = None
    dp_group: int = 0
    engine: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def instances(self) -> int:
        return max(1, len(self.devices) // self.tensor_parallel_size)

    def ports(self) -> list[int]:
        return [self.port + i for i in range(self.instances)]

    def to_dict(self) -> dict[str, Any]:
        from engine.redact import redact_env

        out: dict[str, Any] = {
            "role": self.role,
            "host": self.host,
            "devices": list(self.devices),
            "port": self.port,
            "tensor_parallel_size": self.tensor_parallel_size,
        }
        for key in ("dp_group", "kv_port", "dp_rpc_port"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.engine:
            out["engine"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.engine.items()}
        if self.env:
            out["env"] = redact_env(self.env)
        return out


# Flags the layout writes itself: a profile that passes them through extra_args would fight it.
LAYOUT_FLAGS = {
    "--kv-transfer-config": "nodes.kv_connector and nodes.kv_connector_extra write it",
    "--data-parallel-size": "the layout sets it from the role's instances",
    "--data-parallel-rank": "the layout sets it per instance",
    "--data-parallel-address": "the layout sets it (the group's first host in nodes.addresses)",
    "--data-parallel-rpc-port": "set nodes.dp_rpc_port or the role's dp_rpc_port",
    "--port": "set the role's port (nodes.roles[].port) or nodes.instance_port",
}


def layout_flag(arg: object) -> str | None:
    """Why an extra_args entry may not be in a pd or external-dp profile, or None."""
    flag = str(arg).split("=", 1)[0]
    return f"{flag}: {LAYOUT_FLAGS[flag]}" if flag in LAYOUT_FLAGS else None


def roles_section(
    nodes: Nodes, given: Mapping[str, Any], values: dict[str, dict[str, Any]], locate: Locate
) -> tuple[Nodes, list[Problem]]:
    """`nodes` with its roles and connector settings read from `given` (the raw section), and
    every problem of them: unknown keys, a role missing, NPUs or ports shared on one host."""
    from engine.profiles.schema import SCHEMA, Spec, _env_problems, check_value, suggest
    from engine.yamlfile import Problem, line_of, quote

    problems: list[Problem] = []
    where = locate("nodes.roles")
    extra = given.get("kv_connector_extra") or {}
    if not isinstance(extra, dict):
        problems.append(
            Problem(
                *locate("nodes.kv_connector_extra"),
                "nodes.kv_connector_extra",
                f"must be a mapping, got {quote(extra)}",
            )
        )
        extra = {}
    for arg in values["engine"].get("extra_args", ()):
        why = layout_flag(arg)
        if why:
            problems.append(Problem(*locate("engine.extra_args"), "engine.extra_args", why))
    platform = values[""].get("platform")
    connector = given.get("kv_connector") or ("MooncakeConnectorV1" if platform == "ascend" else None)
    if nodes.mode == "external-dp":
        if given.get("roles"):
            problems.append(Problem(*where, "nodes.roles", "is for mode pd; external-dp runs every rank alike"))
        return nodes, problems
    raw = given.get("roles") or ()
    if not isinstance(raw, (list, tuple)):
        return nodes, [Problem(*where, "nodes.roles", f"must be a list of mappings, got {quote(raw)}")]
    if connector is None:
        problems.append(
            Problem(
                *locate("nodes.kv_connector"),
                "nodes.kv_connector",
                f"is required in mode pd on {platform}: name the KV connector (e.g. ExampleConnector, NixlConnector)",
            )
        )
    per_host = nodes.devices_per_host
    roles: list[Role] = []
    int_spec = {
        "host": Spec(int, default=0, minimum=0, maximum=nodes.count - 1),
        "port": Spec(int, required=True, minimum=1, maximum=65535),
        "tensor_parallel_size": Spec(int, default=1, minimum=1),
        "dp_group": Spec(int, default=0, minimum=0),
        "kv_port": Spec(int, minimum=1, maximum=65535),
        "dp_rpc_port": Spec(int, minimum=1, maximum=65535),
    }
    for i, item in enumerate(raw):
        key = f"nodes.roles[{i}]"
        at = (where[0], line_of(raw, i) or where[1]) if where[1] is not None else where
        if not isinstance(item, dict):
            problems.append(Problem(*at, key, f"must be a mapping with {', '.join(ROLE_KEYS)}, got {quote(item)}"))
            continue

        def line(name: str, item: dict = item, at: tuple = at) -> tuple[str, int | None]:
            return (at[0], line_of(item, name) or at[1]) if at[1] is not None else at

        bad = False
        for name in item:
            if name not in ROLE_KEYS:
                problems.append(
                    Problem(*line(name), f"{key}.{name}", f"unknown key{suggest(str(name), list(ROLE_KEYS))}")
                )
        role = item.get("role")
        if role not in ROLE_NAMES:
            problems.append(
                Problem(*line("role"), f"{key}.role", f"must be one of {', '.join(ROLE_NAMES)}, got {quote(role)}")
            )
            bad = True
        ints: dict[str, Any] = {}
        for name, spec in int_spec.items():
            value, error = check_value(spec, item.get(name))
            if error:
                problems.append(Problem(*line(name), f"{key}.{name}", error))
                bad = True
            ints[name] = spec.default if value is None else value
        devices = item.get("devices")
        if (
            not isinstance(devices, list)
            or not devices
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < per_host for d in devices)
        ):
            problems.append(
                Problem(
                    *line("devices"),
                    f"{key}.devices",
                    f"must be a list of NPU ids from 0 to {per_host - 1} (nodes.devices_per_host), got {quote(devices)}",
                )
            )
            bad = True
        elif len(set(devices)) != len(devices):
            problems.append(Problem(*line("devices"), f"{key}.devices", f"lists an NPU twice: {quote(devices)}"))
            bad = True
        elif len(devices) % ints["tensor_parallel_size"]:
            problems.append(
                Problem(
                    *line("tensor_parallel_size"),
                    f"{key}.tensor_parallel_size",
                    f"{ints['tensor_parallel_size']} must divide the {len(devices)} devices of the entry: each "
                    "instance takes TP of them",
                )
            )
            bad = True
        engine: dict[str, Any] = {}
        raw_engine = item.get("engine") or {}
        if not isinstance(raw_engine, dict):
            problems.append(Problem(*line("engine"), f"{key}.engine", f"must be a mapping, got {quote(raw_engine)}"))
            raw_engine = {}
        for name, value in raw_engine.items():
            spec = SCHEMA["engine"].get(name)
            if spec is None or name in SHARED_ENGINE_KEYS:
                why = (
                    f"is the same for every role (set engine.{name}"
                    + (", or the role's tensor_parallel_size)" if name == "tensor_parallel_size" else ")")
                    if spec is not None
                    else f"unknown key{suggest(str(name), list(SCHEMA['engine']))}"
                )
                problems.append(Problem(*line("engine"), f"{key}.engine.{name}", why))
                continue
            checked, error = check_value(spec, value)
            if error:
                problems.append(Problem(*line("engine"), f"{key}.engine.{name}", error))
            elif checked is not None:
                engine[name] = checked
        for arg in engine.get("extra_args", ()):
            why = layout_flag(arg)
            if why:
                problems.append(Problem(*line("engine"), f"{key}.engine.extra_args", why))
        env, more = _env_problems(item.get("env") or {}, f"{key}.env", line("env"), item.get("env"))
        problems.extend(more)
        if not bad:
            roles.append(
                Role(
                    role=role,
                    host=ints["host"],
                    devices=tuple(devices),
                    port=ints["port"],
                    tensor_parallel_size=ints["tensor_parallel_size"],
                    kv_port=ints["kv_port"],
                    dp_rpc_port=ints["dp_rpc_port"],
                    dp_group=ints["dp_group"],
                    engine=engine,
                    env=env,
                )
            )
    if not problems:
        problems.extend(_together(roles, values, where))
    return replace(nodes, roles=tuple(roles), kv_connector=connector, kv_connector_extra=dict(extra)), problems


def _together(roles: list[Role], values: dict[str, dict[str, Any]], where: tuple[str, int | None]) -> list[Problem]:
    """What the entries say together: both roles present, no NPU or port used twice on a host."""
    from engine.yamlfile import Problem

    problems: list[Problem] = []
    for name in ROLE_NAMES:
        if not any(r.role == name for r in roles):
            problems.append(
                Problem(
                    *where,
                    "nodes.roles",
                    f"has no {name} role: a pd layout needs at least one prefill and one decode instance "
                    f"(add an entry with role: {name})",
                )
            )
    npus: dict[tuple[int, int], str] = {}
    ports: dict[tuple[int, int], str] = {}
    server = values["server"]
    ports[(0, server.get("port", 8000))] = "the proxy (server.port)"
    for i, role in enumerate(roles):
        me = f"nodes.roles[{i}] ({role.role})"
        for device in role.devices if values[""].get("platform") != "cpu" else ():  # a CPU shares its cores
            other = npus.setdefault((role.host, device), me)
            if other != me:
                problems.append(
                    Problem(*where, "nodes.roles", f"{me} and {other} share NPU {device} on host {role.host}")
                )
        for port in role.ports():
            other = ports.setdefault((role.host, port), me)
            if other != me:
                problems.append(
                    Problem(*where, "nodes.roles", f"{me} and {other} both use port {port} on host {role.host}")
                )
    return problems
