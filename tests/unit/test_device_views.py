"""The device views beside `npu-smi info` (ECC, memory, common, volt, board, temp, power, health)
and hccn_tool's (stat, optical, link, net_health): every recorded answer parses to the figures an
operator reads off it, unknown keys are kept, and the exporter writes them under npu-exporter's
names on their own intervals."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FAULTY_VIEWS, FIXTURES, fake_hccn_tool, fake_npu_smi, recorded_nic_answers

from engine.devices.sample import DeviceSample
from engine.devices.sources import NpuSmiSource
from engine.devices.views import intervals, parse_view
from engine.exporter.collect import Exporter
from engine.exporter.deviceviews import parse_nic_view
from engine.exporter.families import families
from engine.netcheck.hccn import optical_values
from engine.netcheck.hccn import stat_counters as parse_stat
from engine.system.recorded import read_transcript
from engine.system.runner import SubprocessRunner
from engine.telemetry.faults import chip_faults, fault_line, worst

NPU_SMI = FIXTURES / "npu_smi"
NETCHECK = FIXTURES / "netcheck"

# recording -> (view, chip 0's figures that must be read)
RECORDED = {
    "common/c1_910b1_23.0.rc2.txt": ("common", {"aicore_current_freq_mhz": 800, "aicore_rated_freq_mhz": 1800}),
    "common/c2_910b_20cores.txt": ("common", {"aicore_current_freq_mhz": 1800, "power_w": 130.4, "aicore_count": 20}),
    "common/c3_910_a1.txt": ("common", {"aicore_current_freq_mhz": 1000, "temperature_c": 46}),
    "common/c3_310p.txt": ("common", {"aicore_current_freq_mhz": 960, "temperature_c": 43}),
    "common/c4_910_faultdiag_doc.txt": ("common", {"aicore_current_freq_mhz": 900, "power_w": 71.7}),
    "common/c5_950_doc.txt": ("common", {"aicore_current_freq_mhz": 100, "power_w": 298.6}),
    "common/c6_310b_200ia2_doc.txt": ("common", {"temperature_c": 38, "rated_power_w": 4.0}),
    "memory/m1_910b_32g.txt": ("memory", {"hbm_temperature_c": 35, "hbm_capacity_mb": 32768}),
    "memory/m3_950_doc.txt": ("memory", {"hbm_temperature_c": 63, "hbm_clock_mhz": 3200}),
    "volt/v1_200ia2_card_doc.txt": ("volt", {"voltage_v": 0.90}),  # not the MCU's 5.07 V
    "volt/v2_200ia2_chip_doc.txt": ("volt", {"voltage_v": 0.80}),
    "ecc/e1_faultdiag_doc.txt": (
        "ecc",
        {"hbm_double_bit_error_cnt": 0, "hbm_double_bit_isolated_pages_cnt": 0, "ddr_single_bit_error_cnt": 0},
    ),
    "ecc/e2_950_doc.txt": (  # newer drivers: no DDR, the pages the next reset isolates
        "ecc",
        {"hbm_double_bit_isolated_pages_cnt": 0, "hbm_double_bit_next_isolated_pages_cnt": 0},
    ),
    "power/p1_910b.txt": ("power", {"power_w": 103.5}),
    "power/p2_950_doc.txt": ("power", {"power_w": 296.5}),
    "temp/t1_910b.txt": ("temp", {"temperature_c": 39}),  # not the MCU's LM75 sensors
    "temp/t2_950_doc.txt": ("temp", {"temperature_c": 53}),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_every_recorded_view_gives_its_figures(name):
    view, expected = RECORDED[name]
    chips = parse_view(view, (NPU_SMI / name).read_text())
    assert list(chips) == [0]
    assert {k: chips[0].values[k] for k in expected} == pytest.approx(expected)
    assert chips[0].unknown == {}  # every key of a recorded answer is known


BOARDS = {
    "board/b1_910b_card_25.5.1.txt": {"serial_number": "1025C9048791", "pci_device_id": "0xD802"},
    "board/b2_910_card_doc.txt": {"software_version": "23.0.5", "pcie_bus_info": "0000:61:00.0"},
    "board/b2_910_chip_doc.txt": {"chip_type": "Ascend", "chip_version": "V1"},
    "board/b3_a2_chip_head.txt": {"chip_type": "Ascend", "chip_name": "910B4"},
    "board/b3_a3_chip_head.txt": {"chip_name": "Ascend910", "npu_name": "9392"},
    "board/b4_950_doc.txt": {"pci_device_id": "0xD806", "board_id": "0x1b"},
}


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_recorded_board_answer_gives_its_words(name):
    chips = parse_view("board", (NPU_SMI / name).read_text())
    assert {k: chips[0].text[k] for k in BOARDS[name]} == BOARDS[name]
    assert chips[0].unknown == {}


def test_a_key_the_table_does_not_know_is_kept_as_printed():
    # The board answer read as if it were `-t common`: none of its keys is a common figure.
    chips = parse_view("common", (NPU_SMI / "board/b1_910b_card_25.5.1.txt").read_text())
    assert chips[0].unknown["Serial Number"] == "1025C9048791"
    assert chips[0].unknown["PCI Device ID"] == "0xD802"
    assert chips[0].values == {}


def test_health_view_carries_the_error_codes():
    from engine.devices.views import health_codes

    assert health_codes(parse_view("health", (NPU_SMI / "health/h2_warning.txt").read_text())[0]) == ("80E01801",)
    assert health_codes(parse_view("health", (NPU_SMI / "health/h1_chip_ok.txt").read_text())[0]) == ()


def test_hccn_stat_counts_every_key_and_the_roce_errors_of_the_faulty_nics():
    after = read_transcript((NETCHECK / "faultdiag-worker0-8nic-after/.recorded/npu_info_before.txt").read_text())
    assert parse_stat(after["hccn_tool_-i_6_-stat_-g"]) == {"roce_rx_err_pkt_num": 13, "roce_tx_err_pkt_num": 77}
    assert parse_stat(after["hccn_tool_-i_0_-stat_-g"]) == {"roce_rx_err_pkt_num": 0, "roce_tx_err_pkt_num": 0}
    doc = parse_stat((NETCHECK / "samples/stat-faultdiag-doc.txt").read_text())
    assert doc["mac_tx_mac_pause_num"] == 0 and doc["nic_rx_all_oct_num"] == 482237805
    assert doc["roce_qp_status_err_num"] == 0 and "..." not in doc


def test_hccn_optical_figures_per_lane():
    kg = read_transcript((NETCHECK / "faultdiag-kg-parse-910a/.recorded/npu_info_before.txt").read_text())
    four = optical_values(kg["hccn_tool_-i_0_-optical_-g"])
    assert four["present"] == "not present" and four["vcc"] == 3262.9 and four["temperature"] == 47
    assert four["rx_power_1"] == 0.0054 and four["tx_power_3"] == 1.4988
    one = optical_values((NETCHECK / "samples/optical-faultdiag-doc.txt").read_text())
    assert one == {"present": "not present", "tx_power_0": 4.4035, "rx_power_0": 1.0189}


def test_hccn_link_and_health_words_come_from_netchecks_parsers():
    assert parse_nic_view("link", (NETCHECK / "samples/link-down.txt").read_text()).word == "DOWN"
    assert parse_nic_view("net_health", (NETCHECK / "samples/net_health-fault.txt").read_text()).word == "Fault"


def test_ecc_and_links_are_polled_less_often_than_utilisation():
    from engine.exporter.collect import DEFAULT_INTERVALS

    every = intervals()
    # utilisation: the table every 5 s, the cards' usages every 15 s
    utilisation = max(DEFAULT_INTERVALS["devices"], DEFAULT_INTERVALS["usages"])
    assert every["npu:ecc"] > every["npu:common"] and every["nic:link"] > utilisation
    assert every["npu:board"] >= 3600


def test_the_diagnostic_names_the_code_the_action_and_the_engine_that_must_move():
    d = DeviceSample("npu3", "npu", "910B2", health="Critical", error_codes=("80E18402", "80E01801"), device_id=3)
    faults = chip_faults(d)
    assert [f.fault.verb for f in faults] == ["isolate", "restart-engine"]
    assert fault_line(worst(faults), [str(n) for n in range(8)]) == (
        "NPU 3: 0x80E18402 HBM multi-bit ECC -> isolate this NPU (SeparateNPU); the engine on NPUs 0-7 must move"
    )


def test_an_unknown_code_is_shown_as_unknown_never_dropped():
    d = DeviceSample("npu0", "npu", "910B2", health="Warning", error_codes=("DEADBEEF",), device_id=0)
    (only,) = chip_faults(d)
    assert only.fault.action == "unknown" and "unknown code" in fault_line(only)


def _exporter(tmp_path: Path) -> Exporter:
    bin_dir = tmp_path / "bin"
    fake_npu_smi(bin_dir, views=FAULTY_VIEWS)
    fake_hccn_tool(bin_dir, recorded_nic_answers())
    runner = SubprocessRunner(path=f"{bin_dir}:/usr/bin:/bin")
    source = NpuSmiSource(runner, program=str(bin_dir / "npu-smi"))
    return Exporter(devices=source, with_runs=False, doctor=False, plogs=False, host="node1")


def _samples(exp: Exporter) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in families(exp.run_once()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_exporter_writes_the_views_under_npu_exporter_names(tmp_path):
    exp = _exporter(tmp_path)
    try:
        s = _samples(exp)
    finally:
        exp.close()

    def value(name: str, chip: str = "5") -> float:
        return next(x.value for x in s[name] if x.labels["id"] == chip)

    assert value("npu_chip_info_aicore_current_freq") == 1800
    assert value("npu_chip_info_hbm_temperature") == 35
    assert value("npu_chip_info_voltage") == 0.9
    assert value("npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt") == 0
    assert value("npu_chip_info_link_status") == 1 and value("npu_chip_info_network_status") == 1
    assert value("npu_chip_roce_rx_err_pkt_num") == 11 and value("npu_chip_roce_tx_err_pkt_num", "6") == 77
    assert value("npu_chip_optical_state") == 0 and value("npu_chip_optical_rx_power_1") == 0.0054
    # the health view's code on every chip, as npu-exporter writes it (decimal) and ours with its action
    assert value("npu_chip_info_error_code") == int("80E01801", 16)
    fault = next(x for x in s["ascendctl_device_fault"] if x.labels["id"] == "5")
    assert fault.labels == {
        "id": "5",
        "code": "0x80E01801",
        "action": "RestartBusiness",
        "verb": "restart-engine",
        "host": "node1",
    }
    assert next(x for x in s["npu_chip_info_serial_number"] if x.labels["id"] == "5").labels["serial_number"] == (
        "1025C9048791"
    )
    sources = {x.labels["source"]: x.value for x in s["ascendctl_source_up"]}
    assert sources["npu-smi -t ecc"] == 1 and sources["hccn_tool -stat"] == 1


def test_a_view_npu_smi_refuses_leaves_the_others_and_says_so(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_npu_smi(bin_dir, views={k: v for k, v in FAULTY_VIEWS.items() if k != "ecc"})
    runner = SubprocessRunner(path=f"{bin_dir}:/usr/bin:/bin")
    source = NpuSmiSource(runner, program=str(bin_dir / "npu-smi"))
    exp = Exporter(devices=source, with_runs=False, doctor=False, plogs=False, host="node1")
    try:
        s = _samples(exp)
    finally:
        exp.close()
    sources = {x.labels["source"]: x.value for x in s["ascendctl_source_up"]}
    assert sources["npu-smi -t ecc"] == 0 and sources["npu-smi -t volt"] == 1
    assert "npu_chip_info_hbm_ecc_double_bit_error_cnt" not in s and "npu_chip_info_voltage" in s
    # no hccn_tool on this host: no NIC views at all, not six sources down
    assert not any(k.startswith("hccn_tool") for k in sources)


ISOLATE = DeviceSample("npu3", "npu", "910B2", health="Critical", error_codes=("80E18402",), device_id=3)


def test_the_devices_panel_marks_a_faulty_chip_with_its_action():
    from ascendctl.tui.render import devices_table
    from engine.telemetry.snapshot import Snapshot, SourceStatus

    fine = DeviceSample("npu4", "npu", "910B2", health="OK", device_id=4)
    text = devices_table(Snapshot(0.0, 1, (ISOLATE, fine), SourceStatus("npu-smi", True))).plain
    rows = {line.split()[0]: line for line in text.splitlines()[2:]}
    assert rows["npu3"].endswith("isolate 0x80E18402 (SeparateNPU)")
    assert "SeparateNPU" not in rows["npu4"]


def test_an_engine_on_a_faulty_npu_is_told_it_must_move():
    from engine.telemetry.faults import engine_fault_lines
    from engine.telemetry.rules import RuleEngine
    from engine.telemetry.snapshot import EngineView, SourceStatus
    from engine.telemetry.thresholds import Thresholds

    npus = tuple(str(n) for n in range(8))
    engine = EngineView(url="http://127.0.0.1:8000", label="run-1", status=SourceStatus("run-1", True), npus=npus)
    other = EngineView(url="http://127.0.0.1:8001", label="run-2", status=SourceStatus("run-2", True), npus=("9",))
    rows = [
        r
        for r in RuleEngine(Thresholds.defaults()).evaluate(0.0, [ISOLATE], {}, [engine, other])
        if r.id == "device-fault"
    ]
    assert [(r.subject, r.severity) for r in rows] == [("npu3", "critical"), ("run-1", "critical")]
    line = "NPU 3: 0x80E18402 HBM multi-bit ECC -> isolate this NPU (SeparateNPU); the engine on NPUs 0-7 must move"
    assert rows[1].cause.startswith(line)
    # the engine screen's "faults" line; none for an engine on healthy NPUs
    assert engine_fault_lines(engine.npus, [ISOLATE]) == [line]
    assert engine_fault_lines(other.npus, [ISOLATE]) == []


def test_an_unknown_code_goes_out_with_action_unknown():
    from engine.exporter.collect import ExporterState

    odd = DeviceSample("npu0", "npu", "910B2", health="Warning", error_codes=("DEADBEEF",), device_id=0)
    samples = [s for fam in families(ExporterState("node1", (odd,))) for s in fam.samples]
    fault = next(s for s in samples if s.name == "ascendctl_device_fault")
    assert (fault.labels["code"], fault.labels["action"], fault.labels["verb"]) == ("0xDEADBEEF", "unknown", "unknown")
    assert next(s for s in samples if s.name == "npu_chip_info_error_code").value == 0xDEADBEEF


def test_a_views_interval_is_set_on_the_command_line():
    from ascendctl.commands.exporter import _intervals

    assert _intervals(["ecc=300", "link=10"]) == {"ecc": 300.0, "link": 10.0}


def test_a_chip_whose_health_view_lists_no_code_has_error_code_0_as_npu_exporter_writes(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_npu_smi(bin_dir, views={**FAULTY_VIEWS, "health": "health/h1_chip_ok.txt"})
    runner = SubprocessRunner(path=f"{bin_dir}:/usr/bin:/bin")
    exp = Exporter(
        devices=NpuSmiSource(runner, program=str(bin_dir / "npu-smi")),
        with_runs=False,
        doctor=False,
        plogs=False,
        host="node1",
    )
    try:
        s = _samples(exp)
    finally:
        exp.close()
    assert {x.value for x in s["npu_chip_info_error_code"]} == {0.0}
    assert len(s["npu_chip_info_error_code"]) == 8  # every chip of the recorded table
    assert "npu_chip_info_error_code_1" not in s and "ascendctl_device_fault" not in s
    # without a health answer (the view not polled yet), no figure: never a guessed 0
    from engine.exporter.collect import ExporterState

    fine = DeviceSample("npu0", "npu", "910B2", health="OK", device_id=0)
    assert not [x for fam in families(ExporterState("node1", (fine,))) for x in fam.samples if "error_code" in x.name]
