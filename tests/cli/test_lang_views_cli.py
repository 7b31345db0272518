"""The rarer outputs in Chinese under LANG=zh_CN.UTF-8: doctor's container, profile, stack and
device rows on recorded machines; --json stays byte for byte what English writes."""

from __future__ import annotations

import json
import re

import pytest
from helpers import FIXTURES

from ascendctl.cli import main

HOSTS = FIXTURES / "hosts"

# Words that only an English sentence has (a row's quoted tool output and commands aside).
ENGLISH = re.compile(r"\b(the|is|are|not|with|but|from|which|this|has|have|its|installed|answers|pairs|recorded)\b")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str, prefixes: tuple[str, ...]) -> list[str]:
    """The rows of the checks whose id starts with one of `prefixes`, each with its fix line; the
    backticked commands left out (they stay as written)."""
    found, keep = [], False
    for line in out.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("正常", "告警", "错误"):
            keep = words[1].startswith(prefixes)
        elif not line.lstrip().startswith("处理："):
            keep = False
        if keep:
            found.append(re.sub(r"`[^`]*`", "", line))
    return found


def english_left(lines: list[str]) -> list[str]:
    return [line for line in lines if ENGLISH.search(line)]


def test_container_rows_in_chinese(capsys, zh_locale):
    _, out, _ = run(capsys, "doctor", "--root", str(HOSTS / "docker-ascend-runtime"))
    assert "docker 24.0.7 有响应（默认运行时 ascend，cgroup cgroupfs）" in out
    assert "Ascend Docker Runtime 已注册为 `ascend`" in out and "是默认运行时" in out
    assert "（取自镜像 tag） 与驱动 25.0.rc1.1 配套" in out or "与驱动 25.0.rc1.1 配套" in out
    _, out, _ = run(capsys, "doctor", "--root", str(HOSTS / "container-ascend-runtime"))
    assert "ASCEND_RT_VISIBLE_DEVICES 写了 4, 5, 6, 7，但容器只有 4 个 NPU" in out
    assert "处理：把 ASCEND_RT_VISIBLE_DEVICES 设为 0 到 3 之间的编号，或者不设置它" in out
    lines = rows(out, ("container.",))
    assert lines and not english_left(lines), english_left(lines)


def test_profile_rows_in_chinese(capsys, zh_locale):
    _, out, _ = run(capsys, "doctor", "--root", str(HOSTS / "podman-a3-image"), "-p", "a3-30b-a3b")
    assert "profile a3-30b-a3b 面向 ascend 主机，本机正是" in out
    assert "tensor_parallel_size 2，可见 NPU 2 个（profile 中的 ASCEND_RT_VISIBLE_DEVICES）" in out
    assert "profile 假定每个设备 64 GiB，实际卡上只有 32 GiB" in out
    assert "处理：在 profile 中设置 device.hbm_gib: 32，然后重新运行 `ascendctl plan`" in out
    assert "是为 A3 构建的，本机的 NPU 属于 A2" in out  # container.image, against this host's chip
    assert "处理：使用为 A2 构建的镜像：quay.io/ascend/vllm-ascend:v0.23.0" in out
    lines = rows(out, ("profile.", "container."))
    assert len(lines) >= 6 and not english_left(lines), english_left(lines)


@pytest.mark.parametrize(
    ("host", "shown"),
    [
        ("torch-npu-mismatch", "torch_npu 2.8.0 不是为 CANN 8.2.RC1 构建的"),
        ("vllm-ascend-3906-910b2-image-0.9.2dev", "不在兼容性矩阵中（已知最新："),
        ("vllm-ascend-1047-910prob-unsupported", "vLLM-Ascend 不支持 910ProB（A1）"),
        ("npu-fault-heartbeat-910b", "进程管理心跳丢失 -> 复位该 NPU"),
        ("container-no-davinci-manager", "npu-smi info 失败：dcmi module initialize failed"),
        ("perf-untuned-910b", "建议值：每个引擎进程绑定到一部分 CPU 核上（建议"),
    ],
)
def test_stack_and_device_rows_in_chinese(capsys, zh_locale, host, shown):
    _, out, _ = run(capsys, "doctor", "--root", str(HOSTS / host))
    assert shown in out
    lines = rows(out, ("stack.", "devices.faults", "devices.chip", "container.", "perf.allocator", "perf.cpu_binding"))
    lines = [line.split("（建议")[0] for line in lines]  # the sources' names stay as they are
    assert not english_left(lines), english_left(lines)


@pytest.mark.parametrize(
    "argv",
    [
        ("doctor", "--root", str(HOSTS / "podman-a3-image"), "-p", "a3-30b-a3b"),
        ("doctor", "--root", str(HOSTS / "container-ascend-runtime")),
        ("doctor", "--root", str(HOSTS / "npu-fault-heartbeat-910b")),
    ],
)
def test_json_is_byte_for_byte_english(capsys, monkeypatch, argv):
    from engine import i18n

    def json_out(lang: str) -> str:
        monkeypatch.setenv("LANG", lang)
        i18n.set_language(None)
        _, out, _ = run(capsys, *argv, "--json")
        data = json.loads(out)
        data["facts"].pop("elapsed_s", None)
        return json.dumps(data, sort_keys=True)

    english = json_out("C.UTF-8")
    assert english == json_out("zh_CN.UTF-8")
    assert "container owns 4 NPU" in english or "is for" in english or "heartbeat" in english


NET = FIXTURES / "netcheck"


def test_netcheck_in_chinese(capsys, zh_locale):
    code, out, _ = run(capsys, "netcheck", "--root", str(NET / "faultdiag-kg-parse-910a"))
    assert code == 1
    assert "8 个 NPU 网卡；4 个错误、1 个告警：网络还不能进行多节点服务" in out
    # hccn_tool's own word stays; what it means and the fix are Chinese, the command as written
    assert "网络健康：网卡 0 为 Socket failed（健康探测无法在网卡上打开 socket）" in out
    assert "处理：检查网卡的地址和掩码（`hccn_tool -i 0 -ip -g`）以及 /etc/hccn.conf" in out
    assert "网卡 0：光模块报告不在位" in out and "跳过  没有网卡应答 `-link -g`：nic.link" in out
    lines = [re.sub(r"`[^`]*`|hccn_tool[^，；）]*", "", line) for line in out.splitlines()[1:]]
    assert not english_left(lines), english_left(lines)
    _, out, _ = run(capsys, "netcheck", "--root", str(NET / "hccl-doc-tls-mixed"))
    assert "各网卡的 TLS 设置不一致" in out


def test_netcheck_json_is_byte_for_byte_english(capsys, monkeypatch):
    from engine import i18n

    def json_out(lang: str) -> str:
        monkeypatch.setenv("LANG", lang)
        i18n.set_language(None)
        _, out, _ = run(capsys, "netcheck", "--json", "--root", str(NET / "faultdiag-kg-parse-910a"))
        data = json.loads(out)
        data["facts"].pop("elapsed_s", None)
        return json.dumps(data, sort_keys=True)

    english = json_out("C.UTF-8")
    assert english == json_out("zh_CN.UTF-8") and "Socket failed on NIC 0" in english


def test_bundle_in_chinese_and_its_archive_in_english(capsys, zh_locale, tmp_path):
    import tarfile

    out_file = tmp_path / "b.tar.gz"
    code, out, _ = run(capsys, "bundle", "--root", str(HOSTS / "healthy-910b"), "--out", str(out_file))
    assert code == 0
    assert "跳过 metrics" in out and "没有正在运行的引擎" in out and "未记录 npu-smi" in out
    assert re.search(r"b\.tar\.gz：[0-9.]+ KiB（收集了 [0-9.]+ KiB），用时 [0-9.]+ 秒", out)
    assert "已脱敏；还原真实值的映射表留在本机：" in out and "（不要发出去）" in out
    assert "not recorded" not in out and "collected" not in out
    with tarfile.open(out_file) as tar:  # what support reads stays English
        manifest = next(m for m in tar.getmembers() if m.name.endswith("manifest.json"))
        text = tar.extractfile(manifest).read().decode()
    assert "no running engine" in text and "没有" not in text


CLUSTER = FIXTURES / "cluster"


def test_cross_node_report_and_its_page_in_chinese(capsys, zh_locale, tmp_path):
    page = tmp_path / "t.html"
    code, out, err = run(capsys, "triage", str(CLUSTER / "clock_skew"), "--html", str(page))
    assert code == 1
    assert "triage: 4 个节点；时钟：已按收集端测得的时钟偏差对齐（manifest）" in out
    assert "最先失败：node2（rank 5） npu-heartbeat-lost" in out and "独立故障：node0（rank 1）" in out
    assert "（按收集端时钟为 2026-05-01 10:58:51.789768：该节点的时钟偏差 +120 秒）" in out
    assert "与 node2 无关：没有超时把两者联系起来" in out and "依据 没有指明对端（只有超时）" in out
    assert "时间线页面已写入" in err
    text = page.read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in text and "<title>集群 triage</title>" in text
    assert "<h1>集群 triage：4 个节点</h1>" in text and "<h2>故障起点</h2>" in text and "<h2>传播链</h2>" in text
    assert "<th>自身故障</th>" in text and "（最先失败）" in text
    assert "Where it started" not in text and "own failure" not in text


def test_cross_node_json_and_english_page_unchanged(capsys, monkeypatch, tmp_path):
    from engine import i18n

    def report(lang: str) -> tuple[str, str]:
        monkeypatch.setenv("LANG", lang)
        i18n.set_language(None)
        _, out, _ = run(capsys, "triage", "--json", str(CLUSTER / "clock_skew"))
        page = tmp_path / f"{lang}.html"
        monkeypatch.setenv("LANG", "C.UTF-8" if lang.startswith("C") else lang)
        run(capsys, "triage", "--lang", "en", str(CLUSTER / "clock_skew"), "--html", str(page))
        i18n.set_language(None)
        return out, page.read_text(encoding="utf-8")

    english, page = report("C.UTF-8")
    chinese, _ = report("zh_CN.UTF-8")
    assert english == chinese and "its own log shows npu-heartbeat-lost" in english
    assert '<html lang="en">' in page and "<h2>Where it started</h2>" in page


def test_cross_node_input_problem_in_chinese(capsys, zh_locale, tmp_path):
    missing = tmp_path / "absent"
    code, out, err = run(capsys, "triage", "--node", f"a={missing}", "--node", f"b={CLUSTER / 'chain' / 'node0'}")
    assert code == 2
    assert f"注意 {missing}：文件或目录不存在；已忽略" in out
    assert f"错误：1 个输入有问题：{missing}：文件或目录不存在；已忽略" in err
    assert "处理：上面的报告涵盖了所有能读取的节点" in err and "left out" not in out + err
