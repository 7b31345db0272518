"""The unseen splits are well-formed: every listed log exists, has a public source and names an
issue that exists (a rule, a code), `none`, or (later splits) `none-fitting`. The accuracy figure
is a benchmark, not a test."""

from __future__ import annotations

import re

import pytest
import yaml
from helpers import FIXTURES, ROOT

from engine.triage import load_rules
from engine.triage.codes import CodeInfo, explain, find_codes

UNSEEN = FIXTURES / "logs" / "unseen"
# every split, in the order they were collected: unseen, unseen2, unseen3 ... (a new folder joins
# every check below by itself)
SPLITS = sorted((p for p in (FIXTURES / "logs").glob("unseen*") if p.is_dir()), key=lambda p: int(p.name[6:] or 1))
# `none-fitting` (from the second split on): a real cause that no rule names; scored like `none`
# (naming anything is wrong).
NO_ISSUE = {split: {"none"} if split == UNSEEN else {"none", "none-fitting"} for split in SPLITS}
# The honest splits: each was collected without the rules' author reading its reports, and each
# must stay apart from every split collected before it.
HELD_OUT = {split: SPLITS[:n] for n, split in enumerate(SPLITS) if n > 0}
# a GitHub issue or pull request, as a link or as "owner/repo/issues/N" (issues and pulls share numbers)
_REF = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+)/(?:issues|pull)/([0-9]+)")


def _index(split) -> dict:
    return yaml.safe_load((split / "INDEX.yaml").read_text(encoding="utf-8"))


def _known_ids() -> set[str]:
    return {r.id for r in load_rules()}


@pytest.mark.parametrize("split", SPLITS, ids=lambda p: p.name)
def test_index_lists_every_log_once_with_a_source(split):
    index = _index(split)
    files = [e["file"] for e in index["logs"]]
    # a split under 25 logs moves 4 points per log: too coarse to report on
    assert len(files) >= 25 and len(files) == len(set(files))
    assert set(files) == {p.name for p in split.glob("*.log")}
    for entry in index["logs"]:
        assert (split / entry["file"]).stat().st_size > 0, entry["file"]
        assert entry["source"].startswith("https://"), entry["file"]
    assert isinstance(index["rules_when_fixed"], int)


def _labels(entry: dict) -> list[str]:
    """The labels an entry carries: its collector's, and a second labeller's where there is one."""
    return [entry[key] for key in ("expect", "expect_second") if key in entry]


@pytest.mark.parametrize("split", SPLITS, ids=lambda p: p.name)
def test_every_expected_issue_exists(split):
    known = _known_ids()
    for entry in _index(split)["logs"]:
        for expect in _labels(entry):
            if expect in NO_ISSUE[split] or expect in known:
                continue
            # a code id such as acl-507011 / cann-ei0006: the code table must explain it
            assert _code_info(expect) is not None, (entry["file"], expect)


def _code_info(expect: str) -> CodeInfo | None:
    """The code-table entry a label such as acl-507011 / cann-ei0006 names, or None."""
    code = expect.split("-", 1)[-1].upper()
    # a bare ACL number carries no context for find_codes, so ask the table directly too
    return next((i for i in [*find_codes(code), explain(code)] if i is not None and i.issue_id == expect), None)


def _refs(text: str) -> set[tuple[str, str]]:
    """(owner/repo, number) of every GitHub issue or pull request the text names."""
    return {(repo.lower(), num) for repo, num in _REF.findall(text)}


@pytest.mark.parametrize("split", list(HELD_OUT), ids=lambda p: p.name)
def test_held_out_split_states_each_cause_and_shares_no_source_with_earlier_splits(split):
    """Each label of an honest split carries the cause the thread gave, and no report is reused
    from an earlier split (the first one the rules' author had read; the others were measured)."""
    earlier = [e["source"] for s in HELD_OUT[split] for e in _index(s)["logs"]]
    earlier_refs = _refs(" ".join(earlier))
    entries = _index(split)["logs"]
    for entry in entries:
        assert isinstance(entry.get("cause"), str) and entry["cause"].strip(), entry["file"]
        assert entry["source"] not in earlier, entry["file"]
        assert not _refs(entry["source"]) & earlier_refs, entry["file"]
    sources = [e["source"].rstrip("/") for e in entries]
    assert len(sources) == len(set(sources))  # one excerpt per report: a thread counts once


@pytest.mark.parametrize("split", list(HELD_OUT), ids=lambda p: p.name)
def test_no_rule_cites_a_report_of_a_held_out_split(split):
    """The split stays held out: no rule's links nor the fixtures' provenance cite its reports."""
    cited = (ROOT / "engine" / "triage" / "rules.yaml").read_text(encoding="utf-8")
    cited += (FIXTURES / "logs" / "PROVENANCE.md").read_text(encoding="utf-8")
    cited_refs = _refs(cited)
    for entry in _index(split)["logs"]:
        source = entry["source"].rstrip("/")
        assert not any(source + end in cited for end in ("'", '"', ")", " ", "\n", "#", "/")), entry["file"]
        # also the bare owner/repo/issues/N form, and a pull request cited as an issue
        assert not _refs(source) & cited_refs, entry["file"]


_STAMP = re.compile(r"[0-9]{2}:[0-9]{2}:[0-9]{2}")  # a log line with a clock time belongs to one run


@pytest.mark.parametrize("split", list(HELD_OUT), ids=lambda p: p.name)
def test_no_rule_sample_is_a_line_of_a_held_out_log(split):
    """What the source checks cannot see: a report cross-posted to a thread a rule cites, or a
    documentation example copied both ways. A held-out log shares no time-stamped line with the
    rules' samples and counter-samples (the same time and PID mean the same run)."""
    seen = {s.strip() for r in load_rules() for s in r.samples + r.counter_samples}
    for log in sorted(split.glob("*.log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            assert not (len(line) >= 60 and _STAMP.search(line) and line in seen), (log.name, line[:100])


@pytest.mark.parametrize("split", SPLITS, ids=lambda p: p.name)
def test_no_label_names_a_generic_issue(split):
    """A `generic` rule or code names a class of failure, never a cause, and by design never leads
    a report: a label naming one could never be met. Such a log expects `none` (or its real cause)."""
    generic = {r.id for r in load_rules() if r.generic}
    for entry in _index(split)["logs"]:
        for expect in _labels(entry):
            info = _code_info(expect)
            assert expect not in generic and not (info is not None and info.generic), (entry["file"], expect)
