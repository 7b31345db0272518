"""Profiles: schema validation with file:line, overrides, placeholders, and argv + env resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT

from ascendctl.cli import main
from engine.errors import BadInput
from engine.profiles import (
    ProfileInvalid,
    dump_profile,
    launch_spec,
    list_profiles,
    load_profile,
    load_profile_text,
    parse_version,
)

SHIPPED = ("910b-32b", "910b-qwen3.5-27b", "910b4-32b", "a3-30b-a3b", "310p-8b", "cuda-h100-32b", "cpu-tiny")


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_every_shipped_profile_is_listed_and_valid():
    names = {r.name for r in list_profiles()}
    assert set(SHIPPED) <= names
    for name in SHIPPED:
        profile = load_profile(name)
        assert profile.name == name
        assert profile.server.host == "127.0.0.1"


def test_all_problems_reported_together_with_line_and_key(tmp_path):
    path = write(
        tmp_path,
        """\
description: broken on purpose
platfrom: ascend
device:
  hbm_gib: -3
model:
  path: /models/x
engine:
  max_num_seqs: lots
  tensor_parallel_size: 2
  tensor_parallel_size: 4
  gpu_memory_utilization: 1.5
server:
  port: 70000
""",
    )
    with pytest.raises(ProfileInvalid) as info:
        load_profile(str(path))
    found = {(p.key, p.where) for p in info.value.problems}
    src = str(path)
    assert ("platfrom", f"{src}:2") in found
    assert ("device.hbm_gib", f"{src}:4") in found
    assert ("engine.max_num_seqs", f"{src}:8") in found
    assert ("engine.tensor_parallel_size", f"{src}:10") in found  # the duplicate
    assert ("engine.gpu_memory_utilization", f"{src}:11") in found
    assert ("server.port", f"{src}:13") in found
    assert ("platform", f"{src}:1") in found  # required, and missing
    messages = " | ".join(str(p) for p in info.value.problems)
    assert "did you mean 'platform'" in messages
    assert "got 'lots'" in messages
    assert "duplicate key (first at line 9)" in messages
    # One error carries all of them, each on its own line, and it is a BadInput (exit 2).
    assert isinstance(info.value, BadInput)
    assert info.value.cause.count("\n") == len(info.value.problems)


@pytest.mark.parametrize(
    "text, line, needle",
    [
        ("platform: cpu\nmodel:\n  path: [unclosed\n", 4, "not valid YAML"),
        ("", 1, "empty"),
        ("- a\n- b\n", 1, "mapping"),
        ("platform: cpu\nmodel: /just/a/string\n", 2, "must be a mapping"),
    ],
)
def test_malformed_files_point_at_a_line(tmp_path, text, line, needle):
    path = write(tmp_path, text)
    with pytest.raises(ProfileInvalid) as info:
        load_profile(str(path))
    first = info.value.problems[0]
    assert first.where == f"{path}:{line}"
    assert needle in first.message


def test_missing_file_and_unknown_name_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="not found"):
        load_profile(str(tmp_path / "nope.yaml"))
    with pytest.raises(BadInput, match="did you mean 'cpu-tiny'") as info:
        load_profile("cpu-tiyn")
    assert "910b-32b" in info.value.fix


def test_binary_file_is_bad_input(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\x00\xff\xfe\x80" * 50)
    with pytest.raises(BadInput, match="not a text file"):
        load_profile(str(path))
    with pytest.raises(BadInput, match="is a directory"):
        load_profile(str(tmp_path) + "/")


def test_overrides_apply_in_order_after_model(tmp_path):
    profile = load_profile(
        "910b-32b",
        ["engine.max_num_seqs=32", "engine.enforce_eager=true", "env.HCCL_BUFFSIZE=512", "engine.max_num_seqs=24"],
        model="/data/m",
    )
    assert profile.engine.max_num_seqs == 24
    assert profile.engine.enforce_eager is True
    assert profile.env["HCCL_BUFFSIZE"] == "512"
    assert profile.model.path == "/data/m"
    assert profile.overrides[-1] == "--model /data/m"
    # --set beats --model
    assert load_profile("910b-32b", ["model.path=/other"], model="/data/m").model.path == "/other"


def test_bad_overrides_are_located_at_the_flag():
    with pytest.raises(ProfileInvalid) as info:
        load_profile("cpu-tiny", ["engine.max_num_seqs=many", "engin.block_size=16", "noequals"])
    wheres = [p.where for p in info.value.problems]
    assert "--set engine.max_num_seqs=many" in wheres
    assert "--set engin.block_size=16" in wheres
    assert "--set noequals" in wheres
    assert any("did you mean 'engine'" in p.message for p in info.value.problems)


def test_cache_placeholder_expands_to_the_cache_dir(tmp_path):
    profile = load_profile("cpu-tiny")
    assert profile.model.path == str(tmp_path / "cache" / "models" / "qwen3-tiny")
    assert profile.model.served_name == "tiny"
    assert "${cache}" not in dump_profile(profile)


def test_resolved_profile_loads_back_unchanged(tmp_path):
    original = load_profile("910b-32b", ["engine.max_num_seqs=4"])
    saved = write(tmp_path, dump_profile(original), "resolved.yaml")
    again = load_profile(str(saved))
    assert again.to_dict() == original.to_dict()


def test_user_profile_shadows_shipped_one(tmp_path):
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "cpu-tiny.yaml").write_text("platform: cpu\ndescription: mine\nmodel:\n  path: /m\n")
    ref = next(r for r in list_profiles() if r.name == "cpu-tiny")
    assert not ref.shipped and ref.description == "mine"
    assert load_profile("cpu-tiny").model.path == "/m"


@pytest.mark.parametrize(
    "extra, key, needle",
    [
        ("device:\n  kind: 310P3\n  hbm_gib: 43\nengine:\n  dtype: bfloat16\n", "engine.dtype", "float16"),
        (
            "device:\n  hbm_gib: 64\n  count: 2\nengine:\n  tensor_parallel_size: 4\n",
            "engine.tensor_parallel_size",
            "more than device.count",
        ),
        (
            "device:\n  hbm_gib: 64\nengine:\n  cpu_kvcache_space_gib: 4\n",
            "engine.cpu_kvcache_space_gib",
            "only applies",
        ),
        (
            "device:\n  hbm_gib: 64\nengine:\n  extra_args: [--disable-log-stats]\n",
            "engine.extra_args",
            "vllm:* metric",
        ),
        (
            "device:\n  hbm_gib: 64\nengine:\n  extra_args: [--api-key=abc]\n",
            "engine.extra_args",
            "never go on a command line",
        ),
        ("device:\n  hbm_gib: 64\nenv:\n  VLLM_API_KEY: secret\n", "env.VLLM_API_KEY", "api_key_env"),
        ("device:\n  count: 1\n", "device.hbm_gib", "required on ascend"),
    ],
)
def test_cross_key_rules(extra, key, needle):
    text = "platform: ascend\nmodel:\n  path: /m\n" + extra
    with pytest.raises(ProfileInvalid) as info:
        load_profile_text(text, "t.yaml")
    problem = next(p for p in info.value.problems if p.key == key)
    assert needle in problem.message


def test_cpu_launch_uses_the_module_and_the_kv_space_env(tmp_path):
    spec = launch_spec(load_profile("cpu-tiny"), "0.32.0", "/venv/bin/python")
    assert spec.argv[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tmp_path / "cache" / "models" / "qwen3-tiny"),
    ]
    assert spec.argv[spec.argv.index("--served-model-name") + 1] == "tiny"
    assert spec.argv[spec.argv.index("--max-model-len") + 1] == "512"
    assert "--enforce-eager" in spec.argv
    assert "--disable-log-stats" not in spec.argv
    assert "--gpu-memory-utilization" not in spec.argv  # the explicit KV size rules
    assert spec.argv[spec.argv.index("--kv-cache-memory-bytes") + 1] == "3145728"
    assert "VLLM_CPU_KVCACHE_SPACE" not in spec.env  # it would override the flag on the CPU engine
    assert spec.env["HF_HUB_OFFLINE"] == "1" and spec.env["NO_COLOR"] == "1"
    assert spec.url == "http://127.0.0.1:8000" and spec.dropped == []


def test_ascend_launch_is_vllm_serve_with_tp():
    spec = launch_spec(load_profile("910b-32b"), "0.23.0", "python3")
    assert spec.argv[:5] == ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "/models/Qwen3-32B"]
    assert spec.argv[spec.argv.index("--tensor-parallel-size") + 1] == "2"
    assert spec.env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"


def test_flags_the_engine_does_not_know_are_dropped_with_the_reason():
    profile = load_profile("910b-32b")
    new = launch_spec(profile, "0.33.0", "python")
    assert new.argv[new.argv.index("--kv-offloading-size") + 1] == "64"
    assert new.argv[new.argv.index("--max-num-queued-reqs") + 1] == "256"
    old = launch_spec(profile, "0.11.0", "python")
    assert "--kv-offloading-size" not in old.argv and "--max-num-queued-reqs" not in old.argv
    assert any("--kv-offloading-size 64" in d and ">= 0.12.0" in d for d in old.dropped)
    mid = launch_spec(profile, "0.23.0", "python")  # offloading yes, admission limits not yet
    assert "--kv-offloading-size" in mid.argv and "--max-num-queued-reqs" not in mid.argv
    unknown = launch_spec(profile, None, "python")
    assert len(unknown.dropped) == 2 and all("unknown" in d for d in unknown.dropped)


def test_api_key_goes_in_the_environment_and_is_masked():
    profile = load_profile("cpu-tiny", ["server.api_key_env=MY_KEY", "server.host=0.0.0.0", "env.HF_TOKEN=hf_x"])
    spec = launch_spec(profile, "0.32.0", "python", environ={"MY_KEY": "sk-very-secret"})
    assert spec.env["VLLM_API_KEY"] == "sk-very-secret"
    assert all("sk-very-secret" not in a for a in spec.argv)
    masked = spec.masked_env()
    assert masked["VLLM_API_KEY"] == "****" and masked["HF_TOKEN"] == "****"
    assert masked["TOKENIZERS_PARALLELISM"] == "false"  # not a secret, despite the name
    assert spec.url == "http://127.0.0.1:8000" and spec.host == "0.0.0.0"
    with pytest.raises(BadInput, match="MY_KEY"):
        launch_spec(profile, "0.32.0", "python", environ={})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0.32.0", (0, 32, 0)),
        ("0.32.0+cpu", (0, 32, 0)),
        ("0.11.0rc3", (0, 11, 0)),
        ("v0.10.1.1", (0, 10, 1)),
        ("0.9", (0, 9, 0)),
        ("junk", None),
        (None, None),
    ],
)
def test_parse_version(text, expected):
    assert parse_version(text) == expected


def test_cli_profile_list_and_show_json(capsys):
    assert main(["profile", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {p["name"] for p in listed["profiles"]} >= set(SHIPPED)
    assert main(["profile", "show", "910b-32b", "--set", "engine.max_num_seqs=4", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["profile"]["engine"]["max_num_seqs"] == 4
    assert shown["overrides"] == ["engine.max_num_seqs=4"]


def test_cli_profile_show_prints_yaml(capsys):
    assert main(["profile", "show", "cpu-tiny"]) == 0
    out = capsys.readouterr().out
    assert "served_name: tiny" in out and "platform: cpu" in out


def test_cli_validate_exits_2_and_lists_every_problem(tmp_path, capsys):
    bad = write(tmp_path, "platform: tpu\nmodel:\n  path: /m\nengine:\n  max_num_seqs: 0\n", "bad.yaml")
    assert main(["profile", "validate", "cpu-tiny", str(bad)]) == 2
    out = capsys.readouterr().out
    assert "valid   cpu-tiny" in out
    assert f"{bad}:1: platform: must be one of ascend, cuda, cpu, got 'tpu'" in out
    assert f"{bad}:5: engine.max_num_seqs: must be an integer >= 1, got 0" in out
    assert main(["profile", "validate", str(bad), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is False and len(data["results"][0]["problems"]) == 2


def test_cli_bad_profile_elsewhere_prints_the_problems_without_traceback(tmp_path, capsys):
    bad = write(tmp_path, "platform: cpu\nmodel:\n  pth: /m\n", "bad.yaml")
    assert main(["plan", "--profile", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: model.pth: unknown key (did you mean 'path'?)" in err
    assert "Traceback" not in err


def test_the_shipped_profiles_come_from_the_top_level_profiles_folder():
    # The lookup every install uses; an editable install maps it onto the repository's profiles/.
    from importlib import resources

    data = resources.files("engine.profiles.shipped")
    assert {p.name for p in data.iterdir()} >= {f"{n}.yaml" for n in SHIPPED}
    assert Path(str(data)).resolve() == (ROOT / "profiles")
