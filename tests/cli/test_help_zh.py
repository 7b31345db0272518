"""Each command's own --help, and the output of plan, deploy and profile, in Chinese under a
Chinese locale: every line within 80 terminal columns (a Chinese character takes two), the flag
names as they are, and English help unchanged in the same process."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from helpers import FIXTURES

from ascendctl.cli import COMMANDS, main
from ascendctl.lazy import command_tree, wrap_cells
from ascendctl.style import cells
from engine import i18n

WIDTH = 80
PATHS = [[]] + [path for path, _command in command_tree(COMMANDS)]
CHINESE = re.compile(r"[\u4e00-\u9fff]")
FLAG = re.compile(r"(?<![\w-])--?[a-zA-Z][\w-]*")
QWEN35_27B = FIXTURES / "models" / "Qwen3.5-27B"


@pytest.fixture
def zh(monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    i18n.set_language(None)
    yield
    i18n.set_language(None)


def _help(path: list[str], capsys) -> str:
    capsys.readouterr()
    assert main([*path, "--help"]) == 0
    return capsys.readouterr().out


def _options(text: str) -> list[str]:
    """The flag names of the options section, in order (the first column of each row)."""
    section = re.split(r"\n(?:Options|选项)[:：]\n", text)[1]
    section = re.split(r"\n(?:Commands|命令)[:：]\n", section)[0]
    return [m for line in section.splitlines() if line.startswith("  -") for m in FLAG.findall(line.split("  ")[1])]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "ascendctl")
def test_each_commands_help_is_chinese_within_80_columns_with_its_flags_unchanged(path, capsys, monkeypatch, zh):
    text = _help(path, capsys)
    wide = [line for line in text.splitlines() if cells(line) > WIDTH]
    assert not wide, f"lines wider than {WIDTH} columns:\n" + "\n".join(wide)
    assert text.startswith("用法：ascendctl") and "\n选项：\n" in text
    assert "显示本帮助并退出。" in text  # Click's own -h line too
    described = text.split("\n选项：\n", 1)[0].split("\n", 1)[1]
    assert CHINESE.search(described), f"`{' '.join(path)} --help` has no Chinese description"
    rows = text.split("\n选项：\n", 1)[1].split("\n命令：\n")[0]
    english_rows = [line for line in rows.splitlines() if re.match(r"^ {2,}[A-Z][a-z]+ [a-z]+ [a-z]+", line)]
    assert not english_rows, f"option help left in English: {english_rows}"

    monkeypatch.setenv("LANG", "C")  # the same command in English, in the same process
    i18n.set_language(None)
    english = _help(path, capsys)
    assert not CHINESE.search(english)
    assert _options(english) == _options(text)  # every flag name, as it is


def test_chinese_help_wraps_between_characters_and_keeps_punctuation_on_its_line():
    text = "检查多机服务所需的网络：每个 NPU 网卡上的 hccn_tool（链路、网络健康、地址、网关），以及给出的对端。"
    lines = wrap_cells(text, 30).splitlines()
    assert len(lines) > 2 and all(cells(line) <= 30 for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")  # nothing lost, nothing cut mid-word
    assert not any(line[0] in "，。、；：）" for line in lines)
    assert "hccn_tool" in "\n".join(lines)  # a Latin word is never split


def test_plan_in_chinese(capsys, zh):
    assert main(["plan", "-p", "910b-qwen3.5-27b", "--model", str(QWEN35_27B)]) == 0
    out = capsys.readouterr().out
    for text in (
        "每个设备的内存",
        "= KV cache",
        "每个序列的状态",
        "最大并发",
        "张量并行选项",
        "结论：正常",
        "混合结构",
    ):
        assert text in out, text
    assert "gpu_memory_utilization" in out  # the setting's name stays as the profile writes it
    assert main(["plan", "-p", "910b-qwen3.5-27b", "--model", str(QWEN35_27B), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "ok" and not any(CHINESE.search(n) for n in data["notes"])  # --json stays English


def test_deploy_says_what_to_do_next_in_chinese(capsys, zh, tmp_path):
    target = tmp_path / "compose.yaml"
    assert main(["deploy", "compose", "--profile", "910b-32b", "-o", str(target)]) == 0
    err = capsys.readouterr().err
    assert f"已写入 {target}" in err and f"启动：docker compose -f {target} up -d" in err
    assert "health check" not in yaml.safe_load(target.read_text())  # the file itself is not translated
    assert main(["deploy", "k8s", "--profile", "910b-32b", "--image", "localhost/x:1"]) == 0
    err = capsys.readouterr().err
    assert "启动探针允许 600 s" in err and "部署：kubectl apply -f FILE" in err
    assert main(["deploy", "compose", "--profile", "cpu-tiny"]) == 2
    assert "平台 cpu 没有已知的引擎镜像" in capsys.readouterr().err


def test_profile_list_and_validate_in_chinese(capsys, zh, tmp_path):
    assert main(["profile", "list"]) == 0
    out = capsys.readouterr().out
    assert re.match(r"名称\s+平台\s+说明\s+来源", out) and "自带" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine:\n  max_num_seqs: many\n")
    assert main(["profile", "validate", "cpu-tiny", str(bad)]) == 2
    out = capsys.readouterr().out
    valid, invalid = (next(line for line in out.splitlines() if line.startswith(w)) for w in ("有效", "无效"))
    assert cells(valid[: valid.index("cpu-tiny")]) == cells(invalid[: invalid.index(str(bad))]) == 8  # one column
    assert re.search(r"  （\d+ 个问题）\n", out) and "engine.max_num_seqs" in out  # the key as it is


def test_bench_compare_in_chinese(capsys, zh):
    bench = FIXTURES / "bench"
    assert main(["bench", "compare", str(bench / "base.json"), str(bench / "slow.json"), "--fail-if-worse", "5"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("bench compare：基线 ") and "bootstrap 置信区间" in out
    assert "更差" in out and "比基线差出 5% 以上且超出噪声：TTFT p50" in out  # the figure's name as it is
