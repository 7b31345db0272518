"""One secret rule for every printout and file: env report, serve's dry run, run.json."""

from __future__ import annotations

import pytest

from engine.doctor.envreport import selected_env
from engine.redact import MASK, is_secret_name, redact_argv, redact_env


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "VLLM_API_KEY",
        "OPENAI_APIKEY",
        "HCCL_CRED",
        "VLLM_PASS",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "HUGGING_FACE_HUB_TOKEN",
        "--hf-token",
        "--api-key",
        "api_key_env_value",
        "HFTOKEN",
    ],
)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "TOKENIZERS_PARALLELISM",
        "KEYRING_BACKEND",
        "ASCEND_HOME_PATH",
        "PASSTHROUGH_MODE",
        "--max-num-seqs",
        "HCCL_BUFFSIZE",
        "VLLM_USE_V1",
        "--tokenizer",
    ],
)
def test_names_that_only_look_like_secrets(name):
    assert not is_secret_name(name)


def test_env_report_and_serve_mask_the_same_variables():
    env = {
        "TOKENIZERS_PARALLELISM": "false",
        "HF_TOKEN": "hf_abc",
        "VLLM_PASS": "x",
        "HCCL_CRED": "y",
        "VLLM_PORT": "8000",
    }
    masked = redact_env(env)
    assert masked == {
        "TOKENIZERS_PARALLELISM": "false",
        "HF_TOKEN": MASK,
        "VLLM_PASS": MASK,
        "HCCL_CRED": MASK,
        "VLLM_PORT": "8000",
    }
    # `ascendctl env` picks a subset of variables, masked by the same rule.
    # (VLLM_TOKENIZER_POOL_SIZE was masked by the old substring rule of `env`.)
    assert selected_env({"VLLM_PASS": "x", "VLLM_TOKENIZER_POOL_SIZE": "4"}) == {
        "VLLM_PASS": MASK,
        "VLLM_TOKENIZER_POOL_SIZE": "4",
    }


def test_secret_flags_are_masked_in_a_command_line():
    argv = [
        "python",
        "-m",
        "vllm",
        "--hf-token",
        "hf_secretvalue",
        "--api-key=sk-x",
        "--port",
        "8000",
        "--tokenizer",
        "/m",
    ]
    assert redact_argv(argv) == [
        "python",
        "-m",
        "vllm",
        "--hf-token",
        MASK,
        f"--api-key={MASK}",
        "--port",
        "8000",
        "--tokenizer",
        "/m",
    ]


def test_limits_named_after_tokens_are_not_secrets():
    # `--max-num-batched-tokens 4096` is a count: a dry run that masked it lost the setting.
    argv = ["vllm", "serve", "--max-num-batched-tokens", "4096", "--max-num-queued-tokens=512", "--hf-token", "x"]
    assert redact_argv(argv) == argv[:-1] + [MASK]
    assert redact_env({"VLLM_MAX_TOKENS": "10", "HF_TOKEN": "hf_x"}) == {"VLLM_MAX_TOKENS": "10", "HF_TOKEN": MASK}


def test_free_text_loses_passwords_tokens_and_url_credentials():
    from engine.redact import redact_text, url_without_credentials

    line = (
        "[ERROR] EZ9999 fetching https://bob:PW1@hf.example/x password=PW2 Authorization: Bearer PW3 "
        '{"api_key": "PW4"} passwd: PW5 Proxy-Authorization: Basic dXNlcjpwYXNz'
    )
    masked = redact_text(line)
    for secret in ("PW1", "PW2", "PW3", "PW4", "PW5", "dXNlcjpwYXNz"):
        assert secret not in masked
    assert "EZ9999" in masked and "Bearer ****" in masked
    # figures that only look like secrets stay: counts, clock times
    kept = "prompt_tokens=12 max_num_batched_tokens=4096 at 09:28:34 num_gpu_blocks: 8192"
    assert redact_text(kept) == kept
    assert url_without_credentials("http://alice:PW@127.0.0.1:9/x") == "http://127.0.0.1:9/x"
