"""Triage on failures it was never shown: the unseen split in tests/fixtures/logs/unseen/.

Each log there is a real failure excerpt from a public report; INDEX.yaml names the issue that
should lead the report (a rule or code id), `none`, or `none-fitting` (a real cause no rule names).
No rule was written from these logs. For each log the scanner's leading issue (what `serve` prints
on a crash) is compared:

    right    the leading issue is the expected one (for `none` / `none-fitting`: nothing, or only
             consequences)
    wrong    it names another issue (for `none` / `none-fitting`: any root-cause issue at all)
    silent   nothing, or only consequences (engine died, start-up failed) or generic codes (EZ9999),
             for an expected issue

    .venv/bin/python benchmarks/bench_triage_unseen.py           # the table and the shares
    .venv/bin/python benchmarks/bench_triage_unseen.py --quiet   # the shares only
    .venv/bin/python benchmarks/bench_triage_unseen.py --split tests/fixtures/logs/unseen2

Where a split's entries also carry `expect_second` (the label a second labeller gave, blind to the
first label and to the tool), the summary says how often the two labellers agree and the shares on
the logs where they do: two careful readers of the same thread disagree often enough that a
single label set cannot resolve a goal of 90% right.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.triage import explain, load_rules, scan_paths  # noqa: E402
from engine.triage.model import TriageReport  # noqa: E402

UNSEEN = ROOT / "tests" / "fixtures" / "logs" / "unseen"


def leading(report: TriageReport) -> str | None:
    """The issue a one-line diagnosis would name (TriageReport.root_cause: consequences, generic
    codes and a warning beside an unnamed error name nothing)."""
    top = report.root_cause()
    return None if top is None else top.id


def folded() -> dict[str, str]:
    """Code ids (acl-507033) that a rule declares as its own failure (`codes:`), to that rule's id:
    reports name such a code by the rule, so a label naming the code is met by the rule."""
    out = {}
    for rule in load_rules():
        for code in rule.codes:
            info = explain(code)
            if info is not None:
                out[info.issue_id] = rule.id
    return out


NO_ISSUE = {"none", "none-fitting"}  # nothing known should be named (none-fitting: no rule fits)
_NO_CAUSE = re.compile(r"(?i)thread states no cause")  # how a label says its thread named no cause


def same_label(a: str, b: str) -> bool:
    """Two labels ask the same of the tool (`none` and `none-fitting` are both scored as silence)."""
    return a == b or (a in NO_ISSUE and b in NO_ISSUE)


def verdict(expect: str, got: str | None) -> str:
    if expect in NO_ISSUE:
        return "right" if got is None else "wrong"
    if got is None:
        return "silent"
    return "right" if got == expect else "wrong"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    ap.add_argument(
        "--split",
        type=Path,
        default=UNSEEN,
        metavar="DIR",
        help="folder holding the logs and their INDEX.yaml (default: tests/fixtures/logs/unseen)",
    )
    args = ap.parse_args()
    split = args.split if args.split.is_absolute() else Path.cwd() / args.split
    if not split.is_dir():  # a path relative to the repository root, run from elsewhere
        split = ROOT / args.split
    index = yaml.safe_load((split / "INDEX.yaml").read_text(encoding="utf-8"))
    counts = {"right": 0, "wrong": 0, "silent": 0}
    stated = {"right": 0, "wrong": 0, "silent": 0}  # logs whose thread states the cause
    agreed = {"right": 0, "wrong": 0, "silent": 0}  # logs whose two labellers agree
    second = {"right": 0, "wrong": 0, "silent": 0}  # scored against the second labeller
    as_rule = folded()
    for entry in index["logs"]:
        report = scan_paths([str(split / entry["file"])])
        got = leading(report)
        expect = as_rule.get(entry["expect"], entry["expect"])
        v = verdict(expect, got)
        counts[v] += 1
        if not _NO_CAUSE.match(entry.get("cause", "")):
            stated[v] += 1
        if "expect_second" in entry:
            other = as_rule.get(entry["expect_second"], entry["expect_second"])
            second[verdict(other, got)] += 1
            if same_label(expect, other):
                agreed[v] += 1
        if not args.quiet:
            print(f"{v:6}  {entry['file']:52}  expect {entry['expect']:36} got {got or '-'}")
    n = sum(counts.values())
    print(
        f"{n} unseen logs in {split.name} (split fixed at {index['rules_when_fixed']} rules): "
        + _shares(counts)
        + " -- goal: right >= 90%, wrong <= 2%"
    )
    if sum(stated.values()) < n:
        # Collectors label threads that state no cause by what the log shows; a stated cause is
        # firmer ground for the label but not for agreement on it (whether a rule's cause is the
        # thread's): two labellers of unseen2-18 agreed on 84% of these and 88% of the rest.
        print(f"  of them {sum(stated.values())} whose thread states the cause: " + _shares(stated))
    if sum(second.values()):
        print("  against a second labeller's labels: " + _shares(second))
        print(
            f"  the two labellers agree on {sum(agreed.values())} of {sum(second.values())}; on those: "
            + _shares(agreed)
        )
    return 0


def _shares(counts: dict[str, int]) -> str:
    n = sum(counts.values()) or 1
    return ", ".join(f"{k} {v} ({100 * v / n:.0f}%)" for k, v in counts.items())


if __name__ == "__main__":
    raise SystemExit(main())
