"""A profile's `nodes` layout resolved to what each host runs: its variables and its commands.

    node_launch(profile, 1, "0.11.0", python) -> NodeLaunch(rank=1, role="dp-headless", env, steps)

Only the commands vLLM and vllm-ascend document are produced; nothing here manages a cluster.

- mode dp (vLLM data parallel, one engine per host): node 0 runs `vllm serve` with
  `--data-parallel-size N --data-parallel-size-local n --data-parallel-address A
  --data-parallel-rpc-port P` and serves the API; node K > 0 adds `--headless
  --data-parallel-start-rank K*n` (vllm-ascend's DeepSeek-V3.1 tutorial, multi-node DP).
- mode ray: every host starts Ray with its variables already set (Ray's workers inherit them;
  RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 keeps Ray off the NPU mask): the head runs
  `ray start --head`, then `vllm serve ... --distributed-executor-backend ray`; a worker runs
  `ray start --address=HEAD:6379 --node-ip-address=IP` (vllm-ascend's Ray tutorial).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from engine.errors import BadInput
from engine.profiles.launch import LaunchSpec, launch_spec
from engine.profiles.schema import Nodes, Profile
from engine.redact import redact_argv, redact_env

DP_MASTER, DP_HEADLESS, RAY_HEAD, RAY_WORKER = "dp-master", "dp-headless", "ray-head", "ray-worker"
RAY_DEFAULT_PORT = 6379
RAY_NOSET = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Step:
    """One command of a host. The engine runs under the supervisor; any other step (`ray start`)
    runs once, before it, and must exit 0."""

    name: str
    argv: list[str]
    supervised: bool = False

    def masked_argv(self) -> list[str]:
        return redact_argv(self.argv)

    def command_line(self) -> str:
        """argv as one shell line, secret flags masked: what gets printed."""
        return shlex.join(self.masked_argv())


@dataclass(frozen=True)
class NodeLaunch:
    """What host `rank` of a layout runs. `env` is ADDED to the caller's environment, for every
    step; `spec` is the engine's launch (None on a Ray worker, which runs no engine)."""

    rank: int
    count: int
    role: str
    address: str | None
    env: dict[str, str]
    steps: list[Step]
    spec: LaunchSpec | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def serves_api(self) -> bool:
        return self.role in (DP_MASTER, RAY_HEAD)

    def masked_env(self) -> dict[str, str]:
        return redact_env(self.env)


def dp_local_size(profile: Profile) -> int:
    """Data-parallel ranks on one host: its devices over the devices of one replica."""
    assert profile.nodes is not None
    return profile.nodes.devices_per_host // (
        profile.engine.tensor_parallel_size * (profile.engine.pipeline_parallel_size or 1)
    )


def data_parallel_size(profile: Profile) -> int:
    """Replicas over the whole layout (1 in mode ray: one replica spans every host)."""
    if profile.nodes is None or profile.nodes.mode != "dp":
        return 1
    return profile.nodes.count * dp_local_size(profile)


def node_env(profile: Profile, rank: int) -> dict[str, str]:
    """The variables the layout sets on host `rank` (before the profile's `env`, which may add
    more, and the host's own `env`, which wins)."""
    nodes = _nodes(profile)
    host = nodes.host(rank)
    env: dict[str, str] = {}
    if nodes.addresses and profile.platform == "ascend":
        env["HCCL_IF_IP"] = nodes.addresses[rank]
    nic = host.nic or nodes.nic
    if nic:
        env.update(GLOO_SOCKET_IFNAME=nic, TP_SOCKET_IFNAME=nic, HCCL_SOCKET_IFNAME=nic)
    if nodes.hccl_buffsize is not None:
        env["HCCL_BUFFSIZE"] = str(nodes.hccl_buffsize)
    if nodes.hccl_connect_timeout is not None:
        env["HCCL_CONNECT_TIMEOUT"] = str(nodes.hccl_connect_timeout)
    if nodes.mode == "ray":
        env[RAY_NOSET] = "1"
    return env


def ray_cli(python: str) -> str:
    """The `ray` script installed beside the engine's interpreter."""
    return str(Path(python).with_name("ray"))


def node_launch(
    profile: Profile,
    rank: int,
    engine_version: str | None,
    python: str,
    environ: Mapping[str, str] | None = None,
) -> NodeLaunch:
    """Host `rank`'s part of the profile's layout. BadInput for a profile without `nodes`, a rank
    outside it, or a layout without the addresses this host needs."""
    nodes = _nodes(profile)
    if not 0 <= rank < nodes.count:
        raise BadInput(
            f"--node-rank {rank} is outside the layout of profile {profile.name} ({nodes.count} hosts)",
            f"give a rank from 0 to {nodes.count - 1}: host K of nodes.addresses runs --node-rank K",
        )
    if not nodes.addresses:
        raise BadInput(
            f"profile {profile.name} names no host addresses: host {rank} cannot find node 0, nor set its HCCL_IF_IP",
            "set nodes.addresses to one IP per host, node 0 first (e.g. --set 'nodes.addresses=[10.0.0.1,10.0.0.2]')",
        )
    headless = nodes.mode == "dp" and rank > 0
    spec = launch_spec(profile, engine_version, python, environ, cli=headless)
    layout_env = node_env(profile, rank)
    env = {**layout_env, **spec.env, **nodes.host(rank).env}
    head = nodes.addresses[0]
    address = nodes.addresses[rank]
    if nodes.mode == "dp":
        local = dp_local_size(profile)
        argv = list(spec.argv)
        argv += [
            "--data-parallel-size",
            str(nodes.count * local),
            "--data-parallel-size-local",
            str(local),
            "--data-parallel-address",
            head,
            "--data-parallel-rpc-port",
            str(nodes.dp_rpc_port),
        ]
        if rank:
            argv += ["--headless", "--data-parallel-start-rank", str(rank * local)]
        engine = replace(spec, argv=argv, env=env)
        role = DP_HEADLESS if rank else DP_MASTER
        notes = [f"headless: no API server here; clients use node 0 ({head}:{profile.server.port})"] if rank else []
        return NodeLaunch(rank, nodes.count, role, address, env, [Step("engine", argv, True)], engine, notes)

    ray = ray_cli(python)
    if rank == 0:
        start = [ray, "start", "--head"]
        if nodes.ray_port != RAY_DEFAULT_PORT:
            start += [f"--port={nodes.ray_port}"]
        argv = list(spec.argv) + ["--distributed-executor-backend", "ray"]
        engine = replace(spec, argv=argv, env=env)
        steps = [Step("ray-head", start), Step("engine", argv, True)]
        workers = "1" if nodes.count == 2 else f"1 to {nodes.count - 1}"
        notes = [f"start the workers (--node-rank {workers}) once the head's Ray is up, then check `ray status`"]
        return NodeLaunch(rank, nodes.count, RAY_HEAD, address, env, steps, engine, notes)
    start = [ray, "start", f"--address={head}:{nodes.ray_port}", f"--node-ip-address={address}"]
    notes = ["the engine runs on node 0; this host lends its NPUs to the Ray cluster (`ray stop` leaves it)"]
    return NodeLaunch(rank, nodes.count, RAY_WORKER, address, env, [Step("ray-worker", start)], None, notes)


def layout_launches(
    profile: Profile, engine_version: str | None, python: str, environ: Mapping[str, str] | None = None
) -> list[NodeLaunch]:
    """Every host's part, node 0 first (what `serve --dry-run` prints for a layout)."""
    return [node_launch(profile, rank, engine_version, python, environ) for rank in range(_nodes(profile).count)]


def _nodes(profile: Profile) -> Nodes:
    if profile.nodes is None:
        raise BadInput(
            f"profile {profile.name} has no `nodes` section: it runs on one host",
            "drop --node-rank, or add a nodes section (docs/profile-keys.md lists its keys)",
        )
    return profile.nodes
