"""The last English outputs in Chinese under LANG=zh_CN.UTF-8: tune's report, progress and errors,
probe's line, profile validate's schema problems, the engine install plan's steps and bench
compare's figures; --json stays byte for byte what English writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from helpers import FIXTURES, ROOT

from ascendctl.cli import main

# Words that only an English sentence has (commands, flags and quoted values aside).
ENGLISH = re.compile(
    r"\b(the|is|are|not|with|from|at|of|must|got|remove|built|runs|held|targets?|capacity|step|"
    r"HOLDS|BREAKS|MISS|same|output|request rate|error rate|share|unreachable|healthy|hung|give|use)\b"
)
CJK = re.compile(r"[\u4e00-\u9fff]")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def json_in_both(capsys, monkeypatch, *argv: str) -> tuple[str, str]:
    """The --json output of `argv` under LANG=C and under zh_CN.UTF-8."""
    from engine import i18n

    got = []
    for lang in ("C", "zh_CN.UTF-8"):
        monkeypatch.setenv("LANG", lang)
        i18n.set_language(None)
        got.append(run(capsys, *argv, "--json")[1])
    return got[0], got[1]


def english_left(text: str) -> list[str]:
    """Lines with an English word, the backticked commands and quoted values left out."""
    text = re.sub(r"`[^`]*`|'[^']*'|--[\w-]+(=\S+)?|\S+\.(yaml|json)\S*", "", text)
    return [line for line in text.splitlines() if ENGLISH.search(line)]


def test_profile_validate_problems_in_chinese(capsys, tmp_path, zh_locale, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nplatform: cpu\nengine:\n  max_num_seqs: lots\n  dtype: float64\n")
    code, out, err = run(capsys, "profile", "validate", str(bad))
    assert code == 2, err
    problems = [line for line in out.splitlines() if line.startswith("  ")]
    assert problems
    # the file:line and the key path stay; the words are Chinese
    assert any(p.strip().startswith(f"{bad}:4: engine.max_num_seqs: 必须是整数 >= 1") for p in problems), out
    assert any("engine.dtype: 必须是" in p and "之一" in p for p in problems), out
    assert not english_left("\n".join(problems)), problems
    en, zh = json_in_both(capsys, monkeypatch, "profile", "validate", str(bad))
    assert en == zh and "must be an integer" in en


def test_engine_plan_steps_in_chinese(capsys, zh_locale, monkeypatch):
    code, out, err = run(capsys, "engine", "plan", "--cann", "8.2.RC1")
    assert code == 0, err
    steps = [line for line in out.splitlines() if re.match(r"\s*\d+\. ", line)]
    assert len(steps) >= 4 and "从源码包构建 vLLM" in out and "卸载 triton" in out and "需要：" in out
    assert not english_left("\n".join(steps)), steps
    en, zh = json_in_both(capsys, monkeypatch, "engine", "plan", "--cann", "8.2.RC1")
    assert en == zh and "remove the CUDA triton" in en


def test_bench_compare_figures_in_chinese(capsys, zh_locale, monkeypatch):
    bench = FIXTURES / "bench"
    argv = ("bench", "compare", str(bench / "base.json"), str(bench / "slow.json"))
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    for word in ("输出 tok/s", "请求速率 req/s", "错误率", "goodput 占比", "持平"):
        assert word in out, word
    rows = [line for line in out.splitlines() if "│" in line]
    assert not english_left("\n".join(rows)), rows
    en, zh = json_in_both(capsys, monkeypatch, *argv)
    assert en == zh and '"request rate"' in en


def test_probe_in_chinese(capsys, tmp_path, zh_locale, monkeypatch):
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path))
    code, out, err = run(capsys, "probe", "http://127.0.0.1:1")
    assert code == 3 and out.startswith("无法连接："), out
    code, out, err = run(capsys, "probe", "nosuchrun")
    assert code == 2 and "没有运行匹配 'nosuchrun'" in err and not english_left(err), err
    en, zh = json_in_both(capsys, monkeypatch, "probe", "http://127.0.0.1:1")
    assert json.loads(en)["status"] == json.loads(zh)["status"] == "unreachable"
    assert json.loads(zh)["summary"] == json.loads(en)["summary"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["tune", "capacity", "http://127.0.0.1:1", "--slo", "ttft_p95=500ms"], "未知的 SLO"),
        (["tune", "capacity", "http://127.0.0.1:1", "--slo", "ttft_p99=fast"], "不是时长"),
        (["tune", "capacity", "http://127.0.0.1:1", "--slo", "ttft_p99=1s", "--by", "tokens"], "未知的 --by"),
        (["tune", "sweep", "-p", "cpu-tiny", "--sweep", "engine.max_num_seqs=8,,16"], "中有空值"),
    ],
)
def test_tune_errors_in_chinese(capsys, tmp_path, zh_locale, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2 and says in err and "处理：" in err, err
    assert not english_left(err), err


STUB = """
import sys
from engine.bench.stub import StubConfig, StubThread
with StubThread(StubConfig(token_delay_s=0.02, max_running=4, max_model_len=1024)) as s:
    print(s.url, flush=True)
    sys.stdin.read()
"""


@pytest.fixture()
def stub_server():
    proc = subprocess.Popen(
        [sys.executable, "-c", STUB], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(10)


def test_tune_capacity_report_in_chinese(capsys, zh_locale, stub_server):
    code, out, err = run(
        capsys,
        "tune", "capacity", stub_server, "-s", "chat-qa", "--scale", "0.1", "--by", "concurrency",
        "--slo", "ttft_p99=150ms", "--step-duration", "2",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("容量：4") and "起约束作用的目标：ttft_p99" in out, out
    assert "吞吐：" in out and "此时：" in out
    assert "第 1 步：1 并发：达标" in err and "不达标" in err, err
    assert err.startswith("tune capacity：对 ")
    assert not english_left(out), out


def test_bench_scaled_scenario_in_chinese_and_its_report_file_english(capsys, tmp_path, zh_locale, stub_server):
    report = tmp_path / "r.json"
    code, out, err = run(
        capsys, "bench", stub_server, "-s", "chat-qa", "--scale", "0.1", "--duration", "2", "--out", str(report)
    )
    assert code in (0, 1), err
    assert "按 x0.1 缩放：" in out and "（原场景：" in out and "\nSLO\n" in out, out
    doc = json.loads(report.read_text(encoding="utf-8"))
    assert doc["description"].startswith("Scaled x0.1: ") and not CJK.search(report.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "argv, says",
    [
        (["doctor", "--rot", "x"], "没有这个选项：--rot（可用的选项："),
        (["engine", "plan"], "缺少选项 '--cann'。"),
        (["bench", "compare"], "缺少参数 'REPORTS...'。"),
        (["nosuch"], "没有这个命令：'nosuch'。"),
        (["tune", "capacity", "http://127.0.0.1:1", "--repeats", "0"], "'--repeats' 的值无效：0 不在范围 x>=1 内。"),
        (["bundle", "--since"], "选项 '--since' 需要一个值。"),
    ],
)
def test_click_usage_errors_in_chinese(capsys, zh_locale, monkeypatch, argv, says):
    code, out, err = run(capsys, *argv)
    assert code == 2 and says in err, err
    assert not english_left(err), err
    code, _, err = run(capsys, *argv, "--json")  # a script greps Click's English
    assert code == 2 and not CJK.search(err), err


def test_bench_unreachable_in_chinese(capsys, zh_locale):
    code, out, err = run(capsys, "bench", "http://127.0.0.1:1", "-s", "chat-qa", "--duration", "1")
    assert code == 3 and "确认服务已启动" in err and "cannot reach" not in err, err


def test_engine_plan_refusal_and_warning_in_chinese(capsys, zh_locale, monkeypatch):
    code, out, err = run(capsys, "engine", "plan", "--cann", "8.2.RC1", "--chip", "A3")
    assert code == 2 and "不支持 A3" in err and not english_left(err), err
    code, out, err = run(capsys, "engine", "plan", "--cann", "8.2.9")
    assert code == 0 and "告警：CANN 8.2.9 没有自己的配套集" in out + err, out + err
    en, zh = json_in_both(capsys, monkeypatch, "engine", "plan", "--cann", "8.2.9")
    assert en == zh and "has no set of its own" in en


def test_launch_and_plan_model_errors_in_chinese(capsys, tmp_path, zh_locale, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "nowhere")
    code, out, err = run(capsys, "plan", "-p", "cpu-tiny", "--model", missing)
    assert code == 2 and f"找不到模型目录：{missing}" in err and not english_left(err.replace(missing, "")), err
    code, out, err = run(
        capsys, "tune", "sweep", "-p", "cpu-tiny", "--sweep", "engine.max_num_seqs=4,8", "--model", missing
    )
    assert code == 2 and f"找不到模型目录：{missing}" in err and "--model DIR 指定" in err, err


def test_bench_compare_worse_list_in_chinese(capsys, zh_locale, monkeypatch):
    bench = FIXTURES / "bench"
    argv = ("bench", "compare", str(bench / "base.json"), str(bench / "slow.json"), "--fail-if-worse", "5")
    code, out, err = run(capsys, *argv)
    assert (
        code == 1
        and "比基线差出 5% 以上且超出噪声：TTFT p50（slow.json，+47.2%）" in out
        and " in slow.json" not in out
    ), out
    en, zh = json_in_both(capsys, monkeypatch, *argv)
    assert en == zh and "TTFT p50 in slow.json (+47.2%)" in en


def test_tune_sweep_skips_in_chinese_and_its_results_file_english(capsys, tmp_path, zh_locale, monkeypatch):
    """Combinations that do not fit are never started: the progress says why in Chinese, the
    results file (read by --resume and by programs) keeps the English."""
    monkeypatch.chdir(tmp_path)
    argv = [
        "tune",
        "sweep",
        "-p",
        "cpu-tiny",
        "--slo",
        "ttft_p99=1s",
        "--sweep",
        "engine.kv_cache_memory_bytes=1024,2048",
    ]
    code, out, err = run(capsys, *argv)
    assert (
        code == 1 and "其中 2 个放不下，不会启动" in err and "已跳过，未启动：放不下：KV cache 能放 0 个 token" in err
    ), err
    assert "没有任何组合在任一负载下达标" in err
    results = (tmp_path / "tune-sweep.jsonl").read_text(encoding="utf-8")
    assert '"reason": "does not fit: ' in results and not CJK.search(results), results
    assert not list(tmp_path.glob("state/runs/*"))  # no engine was started
