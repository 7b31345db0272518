"""npu-smi parsers and the device sources, on recorded real outputs of every layout."""

from __future__ import annotations

import pytest
from top_fakes import NPU, ReplayRunner, npu_text, timeout_error

from engine.devices import HostSource, NpuSmiSource, NvidiaSmiSource, detect_source
from engine.devices.npu_smi import NpuSmiError, parse_health, parse_info, parse_key_values, parse_usages
from engine.errors import Unreachable
from engine.system.runner import ToolMissing


def info(name: str):
    return parse_info(npu_text(f"info/{name}"))


def test_every_recorded_table_parses_to_chips():
    for path in sorted((NPU / "info").glob("*.txt")):
        table = parse_info(path.read_text(encoding="utf-8"))
        assert table.chips, path.name
        assert all(c.temp_c is not None and c.health for c in table.chips), path.name


def test_910b_eight_cards_with_blank_process_name():
    t = info("s01_910b3_25.2.0_blank_name.txt")
    assert (t.tool_version, t.driver_version) == ("25.2.0", "25.2.0")
    assert [c.npu for c in t.chips] == list(range(8))
    npu2 = t.chips[2]
    assert npu2.hbm == (41052, 65536)  # "41052/ 65536": no space before the slash
    assert npu2.power_w == 92.3 and npu2.temp_c == 32 and npu2.bus == "0000:81:00.0"
    assert [(p.npu, p.pid, p.name, p.memory_mb) for p in t.processes] == [(2, 1333928, "", 37709)]
    assert t.idle_npus == {0, 1, 3, 4, 5, 6, 7}


def test_vllm_worker_processes_are_listed_per_card():
    t = info("s02_910b2_25.2.0_vllm_dp.txt")
    assert {p.name for p in t.processes} == {"VLLMWorker_DP"}
    assert sorted(p.npu for p in t.processes) == list(range(8))


def test_a3_has_two_dies_per_card_and_no_power_on_die_one():
    t = info("s04_a3_25.2.3_multiproc.txt")
    assert len(t.chips) == 16
    die0, die1 = t.chips[0], t.chips[1]
    assert (die0.npu, die0.chip, die0.second_id, die0.power_w) == (0, 0, 0, 232.5)
    assert (die1.npu, die1.chip, die1.second_id, die1.power_w) == (0, 1, 1, None)
    assert [p.chip for p in t.processes if p.npu == 0] == [0, 0, 0, 0, 1]
    assert t.idle_npus == {2, 3, 4, 5}


def test_a3_busy_recording_matches_its_known_figures():
    t = info("s19_a3_25.3.rc1_busy.txt")
    assert len(t.chips) == 16 and len(t.processes) == 5
    assert t.idle_npus == {0, 1, 4, 5, 6}
    last = t.chips[-1]
    assert (last.aicore_pct, last.hbm, last.second_id) == (44, (60504, 65536), 15)


def test_wide_26x_layout_with_process_id_in_container():
    t = info("s06_910b2_26.0.rc1_wide.txt")
    assert t.chips[0].aicore_pct == 100 and t.chips[0].hbm == (38711, 65536) and t.chips[0].power_w == 424.0
    assert t.processes[0].pid_in_container == 412309
    partial = info("s05_a3_26.0.rc2_wide_partial.txt")
    assert [(c.npu, c.chip) for c in partial.chips] == [(0, 0), (0, 1)]


def test_old_910_reports_ddr_and_hbm():
    t = info("s07_910prob_24.1.0_ddr.txt")
    assert t.chips[0].ddr == (2387, 13553) and t.chips[0].hbm == (18, 32768)
    redacted = info("s08_910_redacted_misaligned.txt")
    assert (redacted.tool_version, redacted.driver_version) == ("23.0.rc3", "23.0.rc2.3")
    assert redacted.chips[0].hugepages == (1123, 1123) and len(redacted.processes) == 8


def test_310p_family_has_ddr_only_na_power_and_sparse_ids():
    sparse = info("s20_310p3_sparse_ids_truncated.txt")
    assert [c.npu for c in sparse.chips] == [0, 32, 32768, 32800]
    assert all(c.power_w is None and c.hbm is None for c in sparse.chips)
    assert sparse.chips[0].ddr == (19435, 21527)
    duo = info("s14_310p3_duo_mindie.txt")
    assert [(c.npu, c.chip, c.second_id) for c in duo.chips] == [(1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3)]
    assert {p.name for p in duo.processes} == {"mindie_llm_back"}
    big = info("s13_310p3_npu32896.txt")
    assert big.chips[0].npu == 32896 and big.idle_npus == {32896}
    # Card name "310" is all digits: it must not be read as a chip id.
    assert info("s15_310_23.0.0.txt").chips[0].name == "310"


def test_alarm_health_na_bus_and_trailing_spaces():
    chip = info("s16_310b4_alarm_trailing_spaces.txt").chips[0]
    assert chip.health == "Alarm" and chip.bus is None and chip.ddr == (3628, 15609)
    assert [c.hbm for c in info("s10_910b2c_trailing_spaces.txt").chips] == [(20701, 65536), (20687, 65536)]


def test_950_layout_and_irregular_container_output():
    chip = info("s17_950_doc.txt").chips[0]
    assert (chip.npu, chip.name, chip.hbm, chip.bus) == (0, "xxx", (4439, 86016), "0000:91:00.0")
    container = info("s18_910b3_container_irregular.txt").chips[0]
    assert (container.npu, container.hbm) == (3, (3198, 65536))


def test_elided_table_keeps_the_cards_it_shows():
    assert [c.npu for c in info("s09_910b1_23.0.rc2_elided.txt").chips] == [0, 1, 7]


def test_driver_error_becomes_unreachable_with_the_line_and_a_fix():
    with pytest.raises(NpuSmiError) as err:
        parse_info(npu_text("errors/dcmi_device_used_8020.txt"))
    assert "-8020" in err.value.cause and err.value.fix
    assert isinstance(err.value, Unreachable)


@pytest.mark.parametrize("garbage", ["", "\x00\x01\x02binary", "Segmentation fault\n", "+----+\n| |\n"])
def test_garbage_is_a_typed_error(garbage):
    with pytest.raises(NpuSmiError):
        parse_info(garbage)


def test_usages_across_families():
    b = parse_usages(npu_text("usages/u2_910b_25.5.1.txt"))[0]
    assert (b.hbm_total_mb, b.hbm_pct, b.hbm_bw_pct, b.ctrlcpu_pct, b.npu_util_pct) == (65536, 5, 0, 6, 0)
    a1 = parse_usages(npu_text("usages/u3_910_a1.txt"))[0]  # 4-space indented copy
    assert (a1.ddr_total_mb, a1.hbm_total_mb, a1.ctrlcpu_pct) == (15171, 32768, 9)
    p310 = parse_usages(npu_text("usages/u4_310p.txt"))[0]
    assert p310.hbm_total_mb is None and p310.ddr_bw_pct == 51
    a5 = parse_usages(npu_text("usages/u5_950_doc.txt"))  # no Chip Count / Chip ID at all
    assert a5[0].hbm_bw_pct == 3 and a5[0].hbm_total_mb == 131072


def test_usages_accepts_a_real_tab_as_well_as_spaces():
    spaced = npu_text("usages/u1_910b1_23.0.rc2.txt")
    tabbed = "\n".join("\t" + line.strip() if line.strip() else "" for line in spaced.splitlines())
    assert parse_usages(tabbed) == parse_usages(spaced)


def test_health():
    ok = parse_health(npu_text("health/h1_chip_ok.txt"))[0]
    assert ok.status == "OK" and ok.error_codes == ()
    warn = parse_health(npu_text("health/h2_warning.txt"))[0]
    assert warn.status == "Warning" and warn.error_codes == ("80E01801",)
    assert "Temperature" in warn.information
    assert parse_health(npu_text("health/h3_950_doc.txt"))[0].status == "OK"


def test_header_block_of_a_card_level_answer():
    kv = parse_key_values(npu_text("usages/u1_910b1_23.0.rc2.txt"))
    assert kv.header == {"NPU ID": "0", "Chip Count": "1"}


def test_npu_source_merges_table_and_usages():
    runner = ReplayRunner(npu_text("info/s02_910b2_25.2.0_vllm_dp.txt"), npu_text("usages/u2_910b_25.5.1.txt"))
    samples = NpuSmiSource(runner).sample()
    assert [s.key for s in samples] == [f"npu{i}" for i in range(8)]
    s0 = samples[0]
    assert (s0.mem_used_mb, s0.mem_total_mb, s0.mem_bw_pct, s0.ctrlcpu_pct, s0.processes) == (60126, 65536, 0, 6, 1)
    assert round(s0.mem_pct) == 92 and s0.healthy
    assert ("npu-smi", "info", "-t", "usages", "-i", "7") in runner.calls


def test_npu_source_keys_a3_dies_and_310p_ddr_as_memory():
    a3 = NpuSmiSource(ReplayRunner(npu_text("info/s04_a3_25.2.3_multiproc.txt")), usages=False).sample()
    assert [s.key for s in a3[:2]] == ["npu0.0", "npu0.1"] and a3[1].power_w is None
    p310 = NpuSmiSource(ReplayRunner(npu_text("info/s16_310b4_alarm_trailing_spaces.txt")), usages=False).sample()
    assert p310[0].mem_total_mb == 15609 and p310[0].healthy is False


def test_an_unhealthy_chip_brings_its_error_codes_and_a_healthy_one_costs_no_call():
    alarm = ReplayRunner(npu_text("info/s16_310b4_alarm_trailing_spaces.txt"), health=npu_text("health/h2_warning.txt"))
    chip = NpuSmiSource(alarm, usages=False).sample()[0]
    assert chip.health == "Alarm" and chip.error_codes == ("80E01801",)
    assert ("npu-smi", "info", "-t", "health", "-i", "0", "-c", "0") in alarm.calls
    healthy = ReplayRunner(npu_text("info/s02_910b2_25.2.0_vllm_dp.txt"), health=npu_text("health/h2_warning.txt"))
    assert all(s.error_codes == () for s in NpuSmiSource(healthy, usages=False).sample())
    assert healthy.calls == [("npu-smi", "info")]
    broken = ReplayRunner(npu_text("info/s16_310b4_alarm_trailing_spaces.txt"), health=timeout_error())
    assert NpuSmiSource(broken, usages=False).sample()[0].error_codes == ()  # the health word is kept


def test_a_failing_usages_query_keeps_the_table_figures():
    runner = ReplayRunner(npu_text("info/s01_910b3_25.2.0_blank_name.txt"), timeout_error())
    samples = NpuSmiSource(runner).sample()
    assert len(samples) == 8 and samples[2].mem_used_mb == 41052 and samples[2].mem_bw_pct is None


def test_hung_or_missing_npu_smi_raises_unreachable():
    with pytest.raises(Unreachable):
        NpuSmiSource(ReplayRunner(timeout_error())).sample()
    with pytest.raises(Unreachable):
        NpuSmiSource(ReplayRunner(ToolMissing("npu-smi not found on PATH", "install"))).sample()


def test_detect_source_falls_back_to_the_host():
    class Nothing:
        def which(self, name):
            return None

    assert isinstance(detect_source(Nothing()), HostSource)
    assert isinstance(detect_source(ReplayRunner("")), NpuSmiSource)
    host = HostSource().sample()[0]
    assert host.kind == "cpu" and host.mem_total_mb > 0


def test_an_ascend_host_without_npu_smi_on_path_is_still_watched_through_npu_smi(tmp_path):
    """doctor calls a host with /dev/davinci0 Ascend; top must not show the CPU in its place."""
    from engine.system.host import Host

    class Nothing:
        def which(self, name):
            return None

    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "davinci0").touch()
    source = detect_source(host=Host(root=tmp_path, env={}, runner=Nothing()))
    assert isinstance(source, NpuSmiSource)
    (tmp_path / "usr/local/sbin").mkdir(parents=True)
    (tmp_path / "usr/local/sbin/npu-smi").touch()
    source = detect_source(host=Host(root=tmp_path, env={}, runner=Nothing()))
    assert source.program == "/usr/local/sbin/npu-smi"


def test_nvidia_source_reports_an_empty_answer_as_unreachable():
    with pytest.raises(Unreachable):
        NvidiaSmiSource(ReplayRunner("", "")).sample()
