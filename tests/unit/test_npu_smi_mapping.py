"""`npu-smi info -m`: which NPU ID and Chip ID each logic id is (recorded outputs,
tests/fixtures/npu_smi/PROVENANCE.md)."""

from __future__ import annotations

from helpers import FIXTURES

from engine.devices.npu_smi import parse_mapping

MAPPING = FIXTURES / "npu_smi" / "mapping"


def test_eight_910b4_cards_one_chip_each_mcu_rows_left_out():
    ids = parse_mapping((MAPPING / "mp1_910b4_blog.txt").read_text())
    assert sorted(ids) == list(range(8))
    assert all((c.npu, c.chip, c.phy) == (logic, 0, None) for logic, c in ids.items())


def test_a_310p3_card_whose_npu_id_is_not_its_logic_id():
    ids = parse_mapping((MAPPING / "mp2_310p3_doc.txt").read_text())
    assert {logic: (c.npu, c.chip) for logic, c in ids.items()} == {0: (4, 0)}


def test_no_header_no_guess():
    # rows without the `-m` header are not read as a mapping (a table of `npu-smi info` is not one)
    assert parse_mapping((FIXTURES / "npu_smi" / "info" / "s12_310p3_npu6.txt").read_text()) == {}


def test_the_mapping_in_faultdiags_recorded_transcript_tab_indented():
    # MindCluster FaultDiag's environment-check transcript of an 8x 910A host (a TAB before each row),
    # the layout a bundle writes: read back by its command key, as triage reads a bundle's
    from engine.system.recorded import read_transcript

    transcript = FIXTURES / "netcheck" / "faultdiag-kg-parse-910a" / ".recorded" / "npu_info_before.txt"
    ids = parse_mapping(read_transcript(transcript.read_text())["npu-smi_info_-m"])
    assert {logic: (c.npu, c.chip) for logic, c in ids.items()} == {i: (i, 0) for i in range(8)}
