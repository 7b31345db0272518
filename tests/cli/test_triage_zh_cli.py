"""`ascendctl triage` in Chinese, as an operator with a Chinese locale runs it: the report, --explain
and --list speak Chinese; --json, rule ids, codes, flags and the quoted log lines do not change."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from helpers import FIXTURES
from rich.cells import cell_len

from ascendctl.cli import main
from engine import i18n

KV_LOG = FIXTURES / "vllm" / "fail_kv_too_small.log"
CJK = re.compile(r"[\u4e00-\u9fff]")
DEAD = (
    "ERROR 11-29 21:12:20 [core.py:123] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
    "issue. See stack trace (above) for the root cause.\n"
)


@pytest.fixture(autouse=True)
def _locale(monkeypatch):
    """A Chinese locale, nothing else deciding; the language choice is reset after each test."""
    for var in ("LC_ALL", "LC_MESSAGES", "ASCENDCTL_LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    i18n.set_language(None)
    yield
    i18n.set_language(None)


def test_report_in_chinese_under_a_chinese_locale(capsys):
    code = main(["triage", str(KV_LOG)])
    out = capsys.readouterr().out
    assert code == 1
    assert "triage：1 个输入，168 行" in out
    assert "KV cache 没有可用内存" in out  # the rule's Chinese title
    assert "  处理 调大 --gpu-memory-utilization" in out  # its Chinese fix, the flag as it is
    assert "vllm-no-kv-cache-memory" in out  # the rule id is not translated
    # the log line quoted as evidence stays as the engine wrote it
    assert "ValueError: No available memory for the cache blocks." in out
    assert "Consequences of the above" not in out
    assert "上述问题的连带后果（无需单独处理）：vllm-engine-startup-failed" in out


def test_json_is_the_same_in_every_language(capsys, monkeypatch):
    main(["triage", "--json", "--fail-on", "never", str(KV_LOG)])
    chinese = capsys.readouterr().out
    monkeypatch.setenv("LANG", "C")
    i18n.set_language(None)
    main(["triage", "--json", "--fail-on", "never", str(KV_LOG)])
    english = capsys.readouterr().out
    assert chinese == english and not CJK.search(chinese)
    assert json.loads(chinese)["issues"][0]["title"] == "No memory left for the KV cache"


def test_lang_en_and_ascendctl_lang_override_the_locale(capsys, monkeypatch):
    main(["triage", "--lang", "en", "--fail-on", "never", str(KV_LOG)])
    assert "No memory left for the KV cache" in capsys.readouterr().out
    monkeypatch.setenv("ASCENDCTL_LANG", "en")
    i18n.set_language(None)
    main(["triage", "--fail-on", "never", str(KV_LOG)])
    out = capsys.readouterr().out
    assert "No memory left for the KV cache" in out and not CJK.search(out)
    monkeypatch.setenv("LANG", "C")
    monkeypatch.setenv("ASCENDCTL_LANG", "zh")
    i18n.set_language(None)
    main(["triage", "--fail-on", "never", str(KV_LOG)])
    assert "KV cache 没有可用内存" in capsys.readouterr().out


def test_a_symptom_alone_lists_its_likely_causes_in_chinese(capsys, tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(DEAD, encoding="utf-8")
    main(["triage", "--fail-on", "never", str(log)])
    out = capsys.readouterr().out
    assert "可能是以下原因之一（日志里的 vllm-engine-dead 只是现象" in out
    assert "某块 NPU 故障（AI Core、HBM、链路）" in out
    assert "判断依据：在它之前 worker 输出里有 EZ9999 / 5070xx 行" in out
    assert "Likely one of" not in out and "decide by" not in out


def test_device_faults_say_what_to_do_in_chinese(capsys):
    main(["triage", "--fail-on", "never", str(FIXTURES / "logs" / "device")])
    out = capsys.readouterr().out
    assert "设备故障（NPU 自身上报的故障码及处理办法）：" in out
    # the code and MindCluster's action class stay; the fault's name and what to do are Chinese
    assert (
        "NPU 1: 0x40F84E00 host 与 device 心跳丢失 -> 复位该 NPU（npu-smi set -t reset），然后重启引擎 (RestartNPU)"
        in out
    )
    assert "device-npu1-0x40f84e00" in out and "<kworker/5:1H:39365> Heartbeat" in out  # id, log line as they are


def test_the_issues_table_lines_up_with_chinese_headings(capsys):
    main(["triage", "--fail-on", "never", str(KV_LOG)])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "┃" in line or "│" in line]
    assert len(rows) == 4 and rows[0].startswith("级别")  # the heading and three issues

    def columns(line: str, measure) -> list[int]:
        return [measure(line[:n]) for n, ch in enumerate(line) if ch in "┃│"]

    # Measured in terminal cells, every separator sits in the same column on every row; counted in
    # characters it would not (a Chinese heading takes two cells a character).
    assert len({tuple(columns(r, cell_len)) for r in rows}) == 1
    assert len({tuple(columns(r, len)) for r in rows}) > 1


def test_explain_a_rule_a_code_and_a_device_fault_in_chinese(capsys):
    main(["triage", "--explain", "hccl-watchdog-timeout"])
    out = capsys.readouterr().out
    assert out.startswith("hccl-watchdog-timeout  集合通信失败或超时（HCCL watchdog）  错误")
    assert "  原因： HCCL 的 watchdog" in out and "HCCL_EXEC_TIMEOUT" in out
    assert "另一个 rank 崩溃、挂住或被杀" in out and "判断依据：" in out
    assert "匹配： " in out  # the patterns, quoted as they are
    main(["triage", "--explain", "507011"])
    out = capsys.readouterr().out
    assert out.startswith("507011  ACL_ERROR_RT_MODEL_EXECUTE") and "含义：" in out and "E?9999" in out
    assert "报告中： 记为 model-execute-failed" in out
    main(["triage", "--explain", "0x80E18402"])
    out = capsys.readouterr().out
    assert "0x80E18402  HBM 多比特 ECC" in out and "SeparateNPU（隔离）：芯片无法自行恢复" in out


def test_explain_json_stays_english(capsys):
    main(["triage", "--json", "--explain", "hccl-watchdog-timeout"])
    out = capsys.readouterr().out
    assert not CJK.search(out) and json.loads(out)["rule"]["id"] == "hccl-watchdog-timeout"


def test_list_in_chinese_keeps_ids_and_codes(capsys):
    main(["triage", "--list"])
    lines = capsys.readouterr().out.splitlines()
    assert "vllm-no-kv-cache-memory\terror\tvllm\tKV cache 没有可用内存" in lines
    assert any(line.startswith("507011\tacl\tACL_ERROR_RT_MODEL_EXECUTE\t") and CJK.search(line) for line in lines)


def test_an_operators_own_rule_is_shown_as_written(capsys, tmp_path):
    """A rule of the bundled id from --rules is the operator's text: no bundled Chinese for it."""
    own = tmp_path / "own.yaml"
    own.write_text(
        "rules:\n  - id: vllm-no-kv-cache-memory\n    title: Our own KV note\n    severity: error\n"
        "    component: vllm\n    patterns: ['No available memory for the cache blocks']\n"
        "    cause: see the runbook\n    fix: page the on-call lead\n"
        "    samples: ['ValueError: No available memory for the cache blocks.']\n",
        encoding="utf-8",
    )
    main(["triage", "--rules", str(own), "--list"])
    assert "vllm-no-kv-cache-memory\terror\tvllm\tOur own KV note" in capsys.readouterr().out.splitlines()
    main(["triage", "--rules", str(own), "--fail-on", "never", str(KV_LOG)])
    out = capsys.readouterr().out
    assert "Our own KV note" in out and "page the on-call lead" in out and "KV cache 没有可用内存" not in out


def test_a_real_process_under_lang_zh_cn(tmp_path):
    """Through the installed command, the locale alone (no flag) picks Chinese."""
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "ASCENDCTL_LANG")}
    env["LANG"] = "zh_CN.UTF-8"
    run = subprocess.run(
        [sys.executable, "-m", "ascendctl", "triage", "--fail-on", "never", str(KV_LOG)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "KV cache 没有可用内存" in run.stdout and "vllm-no-kv-cache-memory" in run.stdout


@pytest.mark.parametrize(
    "args",
    [["--version"], ["triage", "--json", "--fail-on", "never", str(KV_LOG)]],
    ids=["version", "triage-json"],
)
def test_no_catalogue_is_loaded_when_nobody_reads_it(args):
    """Start-up cost: --version and --json under a Chinese locale read no Chinese catalogue (the
    catalogue package is imported only to read one) and do not import the localiser."""
    probe = (
        "import sys, json\nfrom ascendctl.cli import main\n"
        "try:\n    main(%r)\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('engine.triage.zh', 'engine.triage.localize')))),"
        " file=sys.stderr)"
    ) % (args,)
    env = {**os.environ, "LANG": "zh_CN.UTF-8", "ASCENDCTL_LANG": "zh"}
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert json.loads(run.stderr.strip().splitlines()[-1]) == []


def test_the_report_reads_the_catalogue_only_when_it_prints_chinese():
    """The other side of the test above: the same probe sees the catalogue once a report is
    printed in Chinese (so an empty list above means something)."""
    probe = (
        "import sys, json\nfrom ascendctl.cli import main\n"
        f"main(['triage', '--fail-on', 'never', {str(KV_LOG)!r}])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('engine.triage.zh'))), file=sys.stderr)"
    )
    env = {**os.environ, "LANG": "zh_CN.UTF-8", "ASCENDCTL_LANG": "zh"}
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert json.loads(run.stderr.strip().splitlines()[-1]) == ["engine.triage.zh"]


def test_serve_crash_diagnosis_names_the_known_issue_in_chinese():
    """serve's diagnosis of a crashed engine shows the knowledge base's Chinese texts; the root
    error and the log tail stay as the engine wrote them."""
    import io
    from pathlib import Path

    from ascendctl.launch_view import show_diagnosis
    from ascendctl.output import Output
    from engine.launcher.diagnosis import diagnose
    from engine.launcher.supervisor import Outcome

    diag = diagnose(KV_LOG.read_text(encoding="utf-8").splitlines(), 1)
    err = io.StringIO()
    show_diagnosis(
        Output(stdout=io.StringIO(), stderr=err),
        Outcome(exit_code=1, run_dir=Path("run"), url="http://127.0.0.1:8000", diagnosis=diag),
    )
    text = err.getvalue()
    assert "KV cache 没有可用内存" in text and "调大 --gpu-memory-utilization" in text
    assert "ValueError: No available memory for the cache blocks" in text  # the root error, quoted
