"""A `pd` or `external-dp` layout resolved to its parts: every API server and the proxy in front.

    layout_parts(profile, "0.11.0", python, proxy_python) -> [Part(role="prefill", host=0, ...), ...]

- mode pd (vllm-ascend's PD tutorials, Mooncake): each role's instance is a `vllm serve` with
  `--kv-transfer-config` (kv_producer on prefill, kv_consumer on decode; for the Mooncake
  connectors `kv_port` and the `prefill` / `decode` dp_size and tp_size in kv_connector_extra_config).
  A role with several instances is one data-parallel group when the model runs expert parallel:
  `--data-parallel-size N --data-parallel-rank R --data-parallel-address A --data-parallel-rpc-port P`,
  as the tutorial's run_dp_template.sh; vLLM refuses external data parallel for a dense model, so
  there the instances run independently. The proxy (engine/pdproxy.py) runs on node 0 at server.port.
- mode external-dp: every host runs devices_per_host / (TP x PP) API servers, one per rank, on
  nodes.instance_port + i; the balancer (engine/pdproxy.py --backends) listens on server.port.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from engine.data import load_yaml
from engine.errors import BadInput
from engine.profiles.launch import LaunchSpec, launch_spec
from engine.profiles.multinode import node_env
from engine.profiles.roles import DECODE, PREFILL, Role
from engine.profiles.schema import Profile
from engine.redact import redact_argv, redact_env

PROXY, RANK = "proxy", "rank"
PROXY_MODULE = "engine.pdproxy"
KV_ROLES = {PREFILL: "kv_producer", DECODE: "kv_consumer"}


@dataclass(frozen=True)
class Part:
    """One process of the layout: `role` (prefill, decode, rank or proxy), on host `host`, the
    `index`-th of its role there."""

    role: str
    host: int
    index: int
    address: str
    spec: LaunchSpec
    rank: int | None = None  # the data-parallel rank of the instance within its role
    devices: tuple[int, ...] = ()
    group: int = 0  # its role's dp_group (mode pd)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.host}.{self.index}" if self.role != PROXY else PROXY

    def masked_env(self) -> dict[str, str]:
        return redact_env(self.spec.env)

    def command_line(self) -> str:
        return shlex.join(redact_argv(self.spec.argv))


def layout_parts(
    profile: Profile,
    engine_version: str | None,
    python: str,
    proxy_python: str,
    environ: Mapping[str, str] | None = None,
) -> list[Part]:
    """Every part of a pd or external-dp layout, host by host, the proxy last."""
    nodes = profile.nodes
    assert nodes is not None and nodes.in_parts
    if not nodes.addresses:
        raise BadInput(
            f"profile {profile.name} names no host addresses: the proxy cannot reach the instances",
            "set nodes.addresses to one IP per host, node 0 first (127.0.0.1 for a layout on this machine)",
        )
    if nodes.mode == "external-dp":
        return _external_dp(profile, engine_version, python, proxy_python, environ)
    parts: list[Part] = []
    groups: dict[tuple[str, int], list[Role]] = {}
    for role in nodes.roles:
        groups.setdefault((role.role, role.dp_group), []).append(role)
    # kv_connector_extra_config's dp_size / tp_size: a group of each role (the first).
    size: dict[str, int] = {}
    tp: dict[str, int] = {}
    for (name, _), roles in groups.items():
        size.setdefault(name, sum(r.instances for r in roles))
        tp.setdefault(name, roles[0].tensor_parallel_size)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0] != PREFILL, kv[0][1]))
    engine_id = -1
    for (name, _), roles in ordered:
        rank, group_size = 0, sum(r.instances for r in roles)
        # One data-parallel group is one engine to the connector; independent instances are one each.
        expert = roles[0].engine.get("enable_expert_parallel", profile.engine.enable_expert_parallel)
        grouped = group_size > 1 and bool(expert)
        engine_id += grouped
        for role in roles:
            for i in range(role.instances):
                engine_id += not grouped
                parts.append(
                    _instance(
                        profile, role, i, rank, group_size, size, tp, engine_version, python, environ,
                        roles[0].host, engine_id,
                    )
                )  # fmt: skip
                rank += 1
    parts.sort(key=lambda p: (p.host, p.role != PREFILL, p.spec.port))
    ends = {name: [(p.address, p.spec.port) for p in parts if p.role == name] for name in (PREFILL, DECODE)}
    argv = [proxy_python, "-m", PROXY_MODULE, "--host", profile.server.host, "--port", str(profile.server.port)]
    argv += [
        "--prefiller-hosts",
        *[a for a, _ in ends[PREFILL]],
        "--prefiller-ports",
        *[str(p) for _, p in ends[PREFILL]],
    ]
    argv += ["--decoder-hosts", *[a for a, _ in ends[DECODE]], "--decoder-ports", *[str(p) for _, p in ends[DECODE]]]
    parts.append(_proxy(profile, argv, environ))
    return parts


def _instance(
    profile: Profile,
    role: Role,
    i: int,
    rank: int,
    group_size: int,
    size: dict[str, int],
    tp: dict[str, int],
    engine_version: str | None,
    python: str,
    environ: Mapping[str, str] | None,
    master_host: int,
    engine_id: int,
) -> Part:
    nodes = profile.nodes
    assert nodes is not None
    devices = role.devices[i * role.tensor_parallel_size : (i + 1) * role.tensor_parallel_size]
    own = dict(role.engine)
    # A role's extra_args come after the profile's (the flags both roles share stay).
    own["extra_args"] = tuple(profile.engine.extra_args) + tuple(own.get("extra_args", ()))
    derived = replace(
        profile,
        name=f"{profile.name}-{role.role}",
        engine=replace(profile.engine, tensor_parallel_size=role.tensor_parallel_size, **own),
        server=replace(profile.server, port=role.port + i),
        env={**profile.env, **role.env},
    )
    spec = launch_spec(derived, engine_version, python, environ)
    argv = list(spec.argv)
    if group_size > 1 and derived.engine.enable_expert_parallel:
        argv += [
            "--data-parallel-size",
            str(group_size),
            "--data-parallel-rank",
            str(rank),
            "--data-parallel-address",
            nodes.addresses[master_host],
            "--data-parallel-rpc-port",
            str(role.dp_rpc_port or nodes.dp_rpc_port),
        ]
    argv += ["--kv-transfer-config", json.dumps(kv_transfer_config(profile, role, size, tp, engine_id))]
    env = {**node_env(profile, role.host), **_visible(profile, devices), **spec.env, **nodes.host(role.host).env}
    return Part(
        role.role,
        role.host,
        i,
        nodes.addresses[role.host],
        replace(spec, argv=argv, env=env),
        rank=rank,
        devices=devices,
        group=role.dp_group,
    )


def kv_transfer_config(
    profile: Profile, role: Role, size: dict[str, int], tp: dict[str, int], engine_id: int | None = None
) -> dict:
    """The --kv-transfer-config of one instance. The Mooncake connectors of vllm-ascend take the
    shape of both sides (dp_size, tp_size), a kv_port and an engine_id per data-parallel group (the
    tutorial numbers the groups 0, 1, ... prefill first); any other connector gets its name, its
    role and the profile's kv_connector_extra (vLLM draws a random engine_id per instance)."""
    nodes = profile.nodes
    assert nodes is not None and nodes.kv_connector is not None
    config: dict = {"kv_connector": nodes.kv_connector, "kv_role": KV_ROLES[role.role]}
    extra = dict(nodes.kv_connector_extra)
    if nodes.kv_connector.startswith("Mooncake") and "Store" not in nodes.kv_connector:
        if role.kv_port is not None:
            config["kv_port"] = str(role.kv_port)
        if engine_id is not None:
            config["engine_id"] = str(engine_id)
        extra = {
            PREFILL: {"dp_size": size[PREFILL], "tp_size": tp[PREFILL]},
            DECODE: {"dp_size": size[DECODE], "tp_size": tp[DECODE]},
            **extra,
        }
    if extra:
        config["kv_connector_extra_config"] = extra
    return config


def _visible(profile: Profile, devices: tuple[int, ...]) -> dict[str, str]:
    if profile.platform != "ascend" or not devices:
        return {}
    return {"ASCEND_RT_VISIBLE_DEVICES": ",".join(str(d) for d in devices)}


def _proxy(profile: Profile, argv: list[str], environ: Mapping[str, str] | None) -> Part:
    nodes = profile.nodes
    assert nodes is not None
    env = {"NO_COLOR": "1"}
    host = profile.server.host
    reach = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    url = f"http://{reach}:{profile.server.port}"
    spec = LaunchSpec(argv=argv, env=env, host=host, port=profile.server.port, url=url)
    return Part(PROXY, 0, 0, nodes.addresses[0], spec, notes=[f"clients use {url}"])


def _external_dp(
    profile: Profile, engine_version: str | None, python: str, proxy_python: str, environ: Mapping[str, str] | None
) -> list[Part]:
    nodes = profile.nodes
    assert nodes is not None
    per = profile.engine.tensor_parallel_size * (profile.engine.pipeline_parallel_size or 1)
    local = nodes.devices_per_host // per
    parts: list[Part] = []
    for host in range(nodes.count):
        for i in range(local):
            rank = host * local + i
            derived = replace(
                profile, name=f"{profile.name}-rank", server=replace(profile.server, port=nodes.instance_port + i)
            )
            spec = launch_spec(derived, engine_version, python, environ)
            argv = list(spec.argv)
            if profile.engine.enable_expert_parallel and nodes.count * local > 1:
                argv += [
                    "--data-parallel-size",
                    str(nodes.count * local),
                    "--data-parallel-rank",
                    str(rank),
                    "--data-parallel-address",
                    nodes.addresses[0],
                    "--data-parallel-rpc-port",
                    str(nodes.dp_rpc_port),
                ]
            devices = tuple(range(i * per, (i + 1) * per))
            env = {**node_env(profile, host), **_visible(profile, devices), **spec.env, **nodes.host(host).env}
            parts.append(Part(RANK, host, i, nodes.addresses[host], replace(spec, argv=argv, env=env), rank, devices))
    argv = [proxy_python, "-m", PROXY_MODULE, "--host", profile.server.host, "--port", str(profile.server.port)]
    argv += ["--backends", *[f"{p.address}:{p.spec.port}" for p in parts]]
    parts.append(_proxy(profile, argv, environ))
    return parts


def pick(parts: list[Part], role: str, host: int, index: int | None) -> Part:
    """The part `serve --role R --node-rank K [--instance I]` starts. BadInput when there is none,
    or several and no --instance."""
    mine = [p for p in parts if p.role == role and p.host == host]
    roles = sorted({p.role for p in parts})
    if not mine:
        where = sorted({p.host for p in parts if p.role == role})
        raise BadInput(
            f"the layout runs no {role} on host {host}",
            f"--role is one of {', '.join(roles)}; {role} runs on node rank(s) {', '.join(map(str, where)) or 'none'}",
        )
    if index is None and len(mine) > 1:
        raise BadInput(
            f"host {host} runs {len(mine)} {role} instances: say which one this is",
            f"add --instance I (0 to {len(mine) - 1}), one `ascendctl serve` per instance; --dry-run lists them",
        )
    index = index or 0
    if not 0 <= index < len(mine):
        raise BadInput(f"--instance {index} is outside the {len(mine)} {role} instance(s) of host {host}", "")
    return mine[index]


def group_first(parts: list[Part], part: Part) -> Part | None:
    """The first member (data-parallel rank 0) of the expert-parallel group `part` is in: the one
    its hang watch watches besides itself, as a headless `dp` rank watches node 0. None for that
    member itself, and for an instance that is a group of its own."""
    if "--data-parallel-rank" not in part.spec.argv:
        return None
    members = [
        p for p in parts if p.role == part.role and p.group == part.group and "--data-parallel-rank" in p.spec.argv
    ]
    first = min(members, key=lambda p: p.rank or 0)
    return None if first is part else first


def group_url(parts: list[Part], part: Part) -> str | None:
    """The API of `part`'s group's first member (see group_first), None when there is none."""
    first = group_first(parts, part)
    return None if first is None else f"http://{first.address}:{first.spec.port}"


def known_connectors(python: str, platform: str) -> set[str] | None:
    """The KV connector names the engine's vLLM (and vllm-ascend, where installed) registers, read
    from their sources without importing them; vllm-ascend's from connectors.yaml on an ascend
    profile where it is not installed here. None when the engine has no vLLM."""
    probe = (
        "import importlib.util as u\n"
        "for n in ('vllm', 'vllm_ascend'):\n"
        "    s = u.find_spec(n)\n"
        "    print(n, s.submodule_search_locations[0] if s and s.submodule_search_locations else '')"
    )
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    if not found.get("vllm"):
        return None
    files = [Path(found["vllm"]) / "distributed/kv_transfer/kv_connector/factory.py"]
    if found.get("vllm_ascend"):
        files.append(Path(found["vllm_ascend"]) / "distributed/kv_transfer/__init__.py")
    names: set[str] = set()
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        names.update(re.findall(r"register_connector\(\s*[\"'](\w+)[\"']", text))
    if platform == "ascend" and not found.get("vllm_ascend"):
        names.update(load_yaml("engine.profiles", "connectors.yaml")["vllm_ascend"])
    return names


def check_connector(profile: Profile, python: str) -> None:
    """BadInput (exit 2, nothing started) when the installed vLLM does not know the connector."""
    nodes = profile.nodes
    if nodes is None or nodes.mode != "pd" or nodes.kv_connector is None:
        return
    names = known_connectors(python, profile.platform)
    if names is None or nodes.kv_connector in names:
        return
    import difflib

    close = difflib.get_close_matches(nodes.kv_connector, sorted(names), n=1)
    raise BadInput(
        f"KV connector {nodes.kv_connector!r} (nodes.kv_connector) is unknown to the installed vLLM",
        (f"did you mean {close[0]!r}? " if close else "") + f"the engine registers: {', '.join(sorted(names))}",
    )


def in_container(profile: Profile, part: Part) -> tuple[Profile, Part]:
    """The profile and the part as one instance runs in its own container (`serve --container`):
    the container gets the part's devices, which the container numbers from 0 (logical ids are
    remapped inside), so the part's ASCEND_RT_VISIBLE_DEVICES goes; a connector that passes the KV
    through a directory (connectors.yaml storage_paths) has that directory mounted, the same
    path inside, so that prefill and decode containers share it. The proxy is not an engine: it
    stays on the host (standard-library Python), unchanged."""
    settings = profile.container
    nodes = profile.nodes
    assert settings is not None and nodes is not None
    if part.role == PROXY:
        return profile, part
    volumes = tuple(settings.volumes)
    storage = load_yaml("engine.profiles", "connectors.yaml").get("storage_paths", {}).get(nodes.kv_connector or "")
    if nodes.mode == "pd" and storage:
        path = str(nodes.kv_connector_extra.get(storage["key"], storage["default"]))
        if not any(v.split(":")[0] == path for v in volumes):
            volumes += (f"{path}:{path}",)
    devices = part.devices if part.devices and profile.platform != "cpu" else settings.visible_devices
    boxed = replace(settings, visible_devices=devices, volumes=volumes)
    env = {k: v for k, v in part.spec.env.items() if k != "ASCEND_RT_VISIBLE_DEVICES"}
    return replace(profile, container=boxed), replace(part, spec=replace(part.spec, env=env))


def part_profile(profile: Profile, part: Part) -> Profile:
    """The profile one part is planned and preflighted as: in mode pd, its role's group (its own
    TP, batch and memory share); otherwise the layout's."""
    if profile.nodes is None or profile.nodes.mode != "pd" or part.role == PROXY:
        return profile
    return next(p for key, _, p in role_profiles(profile) if key == (part.role, part.group))


def role_profiles(profile: Profile) -> list[tuple[tuple[str, int], str, Profile]]:
    """A pd layout as one profile per data-parallel group of a role, for `plan`: prefill and
    decode differ in TP, max_num_seqs, batched tokens and memory share, so each is planned alone.
    A group with expert parallel over several instances is planned as a `dp` layout over its own
    hosts (the experts split over its ranks); any other group as one instance."""
    nodes = profile.nodes
    assert nodes is not None and nodes.mode == "pd"
    groups: dict[tuple[str, int], list[Role]] = {}
    for role in nodes.roles:
        groups.setdefault((role.role, role.dp_group), []).append(role)
    out: list[tuple[tuple[str, int], str, Profile]] = []
    for (name, group), roles in sorted(groups.items(), key=lambda kv: (kv[0][0] != PREFILL, kv[0][1])):
        first = roles[0]
        own = dict(first.engine)
        own["extra_args"] = tuple(profile.engine.extra_args) + tuple(own.get("extra_args", ()))
        engine = replace(profile.engine, tensor_parallel_size=first.tensor_parallel_size, **own)
        instances = sum(r.instances for r in roles)
        hosts = sorted({r.host for r in roles})
        label = (
            f"{name} (nodes.roles dp_group {group}): {instances} instance(s) of TP {first.tensor_parallel_size} "
            f"on host(s) {', '.join(map(str, hosts))}"
        )
        if instances > 1 and engine.enable_expert_parallel:
            layout = replace(
                nodes,
                mode="dp",
                count=len(hosts),
                devices_per_host=len(first.devices),
                addresses=tuple(nodes.addresses[h] for h in hosts),
                hosts=tuple(nodes.host(h) for h in hosts),
                roles=(),
            )
            derived = replace(profile, name=f"{profile.name}-{name}", engine=engine, nodes=layout)
        else:
            derived = replace(profile, name=f"{profile.name}-{name}", engine=engine, nodes=None)
        out.append(((name, group), label, derived))
    return out
