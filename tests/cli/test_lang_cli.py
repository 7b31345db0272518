"""ascendctl in Chinese, chosen the way Linux tools choose a language: doctor's rows, verdicts and
fixes, an error and its fix, and --json that stays the same whatever the language."""

from __future__ import annotations

import json
import re

import pytest
from helpers import FIXTURES

from ascendctl.cli import main
from ascendctl.style import cells

HOSTS = FIXTURES / "hosts"
BROKEN = str(HOSTS / "setenv-not-sourced")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_doctor_speaks_chinese_under_a_chinese_locale(capsys, zh_locale):
    code, out, _ = run(capsys, "doctor", "--root", BROKEN)
    assert code == 1  # the exit code does not depend on the language
    assert "昇腾 NPU 主机" in out and "还不能提供服务" in out  # the headline
    assert "错误  cann.set_env" in out  # the status word, in its column; the check id as it is
    assert "没有 source set_env.sh：ASCEND_TOOLKIT_HOME 和 ASCEND_HOME_PATH 均未设置" in out
    assert "处理：source /usr/local/Ascend/ascend-toolkit/set_env.sh" in out  # the command stays a command
    assert "跳过  记录的机器无法得知磁盘空间：system.disk" in out
    assert out.rstrip().endswith("有错误")  # the verdict
    assert re.search(r"\n\d+ 项正常、\d+ 个告警、3 个错误、\d+ 项跳过，用时 [0-9.]+ 秒：有错误\n", out)


def test_chinese_status_words_keep_the_columns_lined_up(capsys, zh_locale):
    """The status word is two Chinese characters (four columns) padded to five: every check id
    starts in the same terminal column, as in English."""
    _, out, _ = run(capsys, "doctor", "--root", BROKEN)
    starts = set()
    for line in out.splitlines():
        for check_id in ("host.platform", "cann.set_env", "cann.nnal ", "env.ld_order", "devices.chip"):
            if check_id in line and not line.lstrip().startswith(("跳过", "处理")):
                starts.add(cells(line[: line.index(check_id)]))
    assert starts == {8}, starts


def test_lang_flag_and_variable_override_the_locale(capsys, monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert "ready to serve" in run(capsys, "doctor", "--lang", "en", "--root", str(HOSTS / "healthy-910b"))[1]
    monkeypatch.setenv("LANG", "C.UTF-8")
    assert "可以提供服务" in run(capsys, "--lang=zh", "doctor", "--root", str(HOSTS / "healthy-910b"))[1]
    monkeypatch.setenv("ASCENDCTL_LANG", "zh")
    assert "可以提供服务" in run(capsys, "doctor", "--root", str(HOSTS / "healthy-910b"))[1]
    code, _, err = run(capsys, "doctor", "--lang", "fr")
    assert code == 2 and "--lang 'fr' is not one of en, zh" in err


def test_an_error_and_its_fix_in_chinese(capsys, zh_locale):
    code, out, err = run(capsys, "profile", "show", "no-such")
    assert code == 2 and not out
    assert "错误：没有名为 'no-such' 的 profile" in err
    assert "处理：从以下选一个：" in err and "`ascendctl profile list`" in err


def test_an_error_under_json_stays_english(capsys, zh_locale):
    code, _, err = run(capsys, "profile", "show", "no-such", "--json")
    assert code == 2
    assert "error: no profile named 'no-such'" in err and "错误" not in err


def test_doctor_list_checks_titles_in_chinese(capsys, zh_locale):
    _, out, _ = run(capsys, "doctor", "--list-checks")
    assert "devices.health" in out and "每颗 NPU 芯片都报告 Health OK" in out


@pytest.mark.parametrize("host", ["setenv-not-sourced", "healthy-910b"])
def test_json_is_the_same_in_both_languages(capsys, monkeypatch, host):
    from engine import i18n

    def doctor_json(lang: str) -> dict:
        monkeypatch.setenv("LANG", lang)
        i18n.set_language(None)
        _, out, _ = run(capsys, "doctor", "--json", "--root", str(HOSTS / host))
        data = json.loads(out)
        data["facts"].pop("elapsed_s", None)
        return data

    english = doctor_json("C.UTF-8")
    assert english == doctor_json("zh_CN.UTF-8")
    assert english["headline"].startswith("Ascend NPU host")


def test_serve_explains_a_crash_in_chinese(capsys, monkeypatch, tmp_path, zh_locale):
    """serve's diagnosis under LANG=zh_CN.UTF-8, with the stand-in engine that replays a recorded
    vLLM crash (tests/cli/test_serve.py drives it the same way in English)."""
    import dataclasses

    from helpers import SAMPLES, fake_engine_argv, fake_tiny_model, free_port

    import ascendctl.profile_args as profile_args
    from engine.demo.ensure import model_dir

    fake_tiny_model(model_dir())
    real_resolve = profile_args.resolve
    port = free_port()

    def resolve(profile, model, sets):
        prof, spec, version = real_resolve(profile, model, [*sets, f"server.port={port}"])
        argv = fake_engine_argv(SAMPLES / "fail_kv_too_small.log", port, tmp_path / "pids.json", "--exit", "1")
        return prof, dataclasses.replace(spec, argv=argv), version

    monkeypatch.setattr(profile_args, "resolve", resolve)
    code = main(["serve", "--profile", "cpu-tiny", "--no-engine-output"])
    err = capsys.readouterr().err
    assert code == 1
    assert "错误：引擎在就绪前退出（退出码 1）" in err
    assert "原因：ValueError: No available memory for the cache blocks" in err  # the log's line, quoted as it is
    assert "已知问题" in err and "处理：" in err
    assert "完整日志：" in err and "engine.log" in err


def test_root_help_lists_the_commands_in_chinese(capsys, zh_locale):

    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "检查本机能否提供服务，每个问题都给出处理办法。" in out and "--lang LANG" in out


def test_what_is_written_for_support_stays_english(zh_locale):
    """`ascendctl bundle` builds its doctor report under english(): an archive made on a Chinese
    desktop reads the same to support and to `doctor --root` as any other."""
    from engine import i18n
    from engine.doctor import run_doctor

    assert "主机" in run_doctor(BROKEN).headline
    with i18n.english():
        report = run_doctor(BROKEN)
    assert report.headline.startswith("Ascend NPU host") and "not ready to serve" in report.headline
    assert i18n._("ok") == "正常"  # and the language comes back after it
