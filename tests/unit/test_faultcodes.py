"""The device fault code table: MindCluster's 804 entries, each with a known action and verb."""

from __future__ import annotations

import re

import pytest

from engine.errors import BadInput
from engine.triage import faultcodes
from engine.triage.faultcodes import ACTIONS, VERBS, action_verbs, class_codes, device_fault

# faultCode.json of Ascend/mind-cluster at the commit faultcodes.yaml names.
FILE_COUNTS = {
    "NotHandle": 132,
    "RestartRequest": 33,
    "RestartBusiness": 26,
    "FreeRestartNPU": 23,
    "RestartNPU": 162,
    "SeparateNPU": 215,
    "PreSeparateNPU": 200,
    "SubHealth": 13,
}


def test_counts_per_class_are_the_files():
    codes = class_codes()
    assert {k: len(v) for k, v in codes.items()} == FILE_COUNTS
    assert sum(FILE_COUNTS.values()) == 804
    assert faultcodes._tables()["source"]["file"] == "component/ascend-device-plugin/build/faultCode.json"
    assert re.fullmatch(r"[0-9a-f]{40}", faultcodes._tables()["source"]["commit"])


def test_every_entry_is_a_hex_code_with_a_known_action_and_verb():
    verbs = action_verbs()
    assert set(verbs) == {*ACTIONS, "unknown"}
    assert set(verbs.values()) <= set(VERBS)
    for action, codes in class_codes().items():
        assert action in ACTIONS
        for code in codes:
            assert re.fullmatch(r"[0-9A-F]{8,9}", code), code
            fault = device_fault(code)
            assert fault.action in ACTIONS and fault.verb == verbs[fault.action]
    assert len(faultcodes.all_faults()) == 802  # B4060011 twice, A2301001 in two classes


def test_the_verbs_on_call_acts_on():
    assert action_verbs() == {
        "SeparateNPU": "isolate",
        "PreSeparateNPU": "isolate",
        "RestartNPU": "reset-npu",
        "FreeRestartNPU": "reset-npu",
        "RestartBusiness": "restart-engine",
        "RestartRequest": "restart-engine",
        "SubHealth": "watch",
        "NotHandle": "ignore",
        "unknown": "unknown",
    }


@pytest.mark.parametrize("spelling", ["0x80E18402", "0x80e18402", "80E18402", " 80e18402 ", 0x80E18402])
def test_lookup_accepts_every_spelling(spelling):
    fault = device_fault(spelling)
    assert (fault.code, fault.action, fault.verb) == ("0x80E18402", "SeparateNPU", "isolate")


def test_a_code_in_two_classes_takes_the_more_serious():
    # A2301001 is under RestartBusiness and SeparateNPU; the device plugin checks SeparateNPU first
    assert device_fault("A2301001").action == "SeparateNPU"
    assert device_fault("80E01801").action == "RestartBusiness"


def test_an_unknown_code_is_unknown_never_none():
    fault = device_fault("0x12345678")
    assert (fault.code, fault.action, fault.verb) == ("0x12345678", "unknown", "unknown")
    assert fault.severity == "warning"
    assert "unknown code" in fault.headline()


@pytest.mark.parametrize("bad", ["NA", "", "0xZZ", -1, None, 1.5])
def test_garbage_is_refused_with_a_fix(bad):
    with pytest.raises(BadInput):
        device_fault(bad)


def test_common_codes_have_meaning_fix_and_a_cited_source():
    meanings = faultcodes._tables()["meanings"]
    assert len(meanings) >= 40
    listed = {c for codes in class_codes().values() for c in codes}
    for key, entry in meanings.items():
        assert str(key) in listed, f"{key}: not a code of faultCode.json"
        assert set(entry) == {"name", "meaning", "fix", "source"}, key
        assert all(isinstance(v, str) and v.strip() for v in entry.values()), key
        assert entry["source"].startswith("https://"), key


def test_the_headline_on_call_reads():
    assert device_fault(0x80E18402).headline() == "0x80E18402 HBM multi-bit ECC -> isolate this NPU (SeparateNPU)"
    fault = device_fault("80E01809")
    assert (fault.action, fault.verb, fault.name) == ("NotHandle", "ignore", "HBM multi-bit ECC found by patrol scrub")
    assert fault.source.startswith("https://www.hiascend.com/")
    # a listed code without a written meaning still gets its class's action
    bare = device_fault("A4025021")
    assert (bare.action, bare.meaning, bare.title) == ("NotHandle", None, "0xA4025021")


def test_what_a_device_fault_explains_are_rules_that_exist():
    from engine.triage.faultcodes import triage_explains, triage_severity
    from engine.triage.rules import load_rules

    ids = {r.id for r in load_rules()}
    assert triage_explains() and set(triage_explains()) <= ids
    assert [triage_severity(a) for a in ACTIONS] == [
        "critical", "critical", "critical", "error", "error", "error", "warning", "info"
    ]  # fmt: skip
