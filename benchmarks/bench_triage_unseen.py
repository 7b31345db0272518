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
    likely   the leading evidence is only a symptom, and the report says "likely one of" its 2-3
             candidate causes instead of naming one. Never right (right is one name, the expected
             one) and never wrong; counted on its own line, split into: the expected cause is
             among the candidates, the label is `none` / `none-fitting` (no single name, as it
             asks), or neither

    .venv/bin/python benchmarks/bench_triage_unseen.py           # the table and the shares
    .venv/bin/python benchmarks/bench_triage_unseen.py --quiet   # the shares only
    .venv/bin/python benchmarks/bench_triage_unseen.py --split tests/fixtures/logs/unseen2
    .venv/bin/python benchmarks/bench_triage_unseen.py --quiet --splits unseen17,unseen18   # and combined

The goal (issue 29, restated on what two labellers support): on blind splits labelled twice
before measuring, where both labellers agree, a named cause is wrong on at most 3% of the logs
while right stays at least at 77% (unseen17 + unseen18 when the goal was set). With several
splits the last line scores it on all of them together.

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


GOAL_WRONG, GOAL_RIGHT = 0.03, 0.77  # on the logs whose two labellers agree
LOGS = ROOT / "tests" / "fixtures" / "logs"


def leading(report: TriageReport) -> str | None:
    """The issue a one-line diagnosis would name (TriageReport.root_cause: consequences, generic
    codes, a warning beside an unnamed error and a symptom with `likely` causes name nothing)."""
    top = report.root_cause()
    return None if top is None else top.id


def candidates(report: TriageReport) -> tuple[str, ...] | None:
    """The rule ids a "likely one of" report lists (a candidate in words counts as no id), or
    None when the report does not say "likely"."""
    top = report.likely()
    return None if top is None else tuple(c.rule for c in top.likely if c.rule)


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


def verdict(expect: str, got: str | None, likely: tuple[str, ...] | None = None) -> str:
    if likely is not None:
        return "likely"
    if expect in NO_ISSUE:
        return "right" if got is None else "wrong"
    if got is None:
        return "silent"
    return "right" if got == expect else "wrong"


KINDS = ("right", "wrong", "silent", "likely")


class Tally:
    """right / wrong / silent / likely counts, and how the likely ones stand to the label."""

    def __init__(self) -> None:
        self.n = dict.fromkeys(KINDS, 0)
        self.likely = {"among": 0, "none": 0, "other": 0}

    def add(self, v: str, expect: str, likely: tuple[str, ...] | None) -> None:
        self.n[v] += 1
        if v == "likely" and likely is not None:
            self.likely["among" if expect in likely else "none" if expect in NO_ISSUE else "other"] += 1

    def merge(self, other: Tally) -> None:
        for k in KINDS:
            self.n[k] += other.n[k]
        for k in self.likely:
            self.likely[k] += other.likely[k]

    def total(self) -> int:
        return sum(self.n.values())

    def shares(self) -> str:
        return _shares(self.n if self.n["likely"] else {k: v for k, v in self.n.items() if k != "likely"})

    def likely_line(self) -> str:
        a = self.likely
        return (
            f"likely, expected cause among the candidates: {a['among']}; label none (no single name, "
            f"as it asks): {a['none']}; neither: {a['other']}"
        )


def score(split: Path, quiet: bool, as_rule: dict[str, str]) -> dict[str, Tally]:
    index = yaml.safe_load((split / "INDEX.yaml").read_text(encoding="utf-8"))
    t = {k: Tally() for k in ("all", "stated", "agreed", "second")}
    for entry in index["logs"]:
        report = scan_paths([str(split / entry["file"])])
        got, likely = leading(report), candidates(report)
        expect = as_rule.get(entry["expect"], entry["expect"])
        v = verdict(expect, got, likely)
        t["all"].add(v, expect, likely)
        if not _NO_CAUSE.match(entry.get("cause", "")):
            t["stated"].add(v, expect, likely)
        if "expect_second" in entry:
            other = as_rule.get(entry["expect_second"], entry["expect_second"])
            t["second"].add(verdict(other, got, likely), other, likely)
            if same_label(expect, other):
                t["agreed"].add(v, expect, likely)
        if not quiet:
            lead = report.likely()
            shown = got or (f"likely ({lead.id}): " + ", ".join(likely or ("causes in words",)) if lead else "-")
            print(f"{v:6}  {entry['file']:52}  expect {entry['expect']:36} got {shown}")
    n = t["all"].total()
    print(f"{n} unseen logs in {split.name} (split fixed at {index['rules_when_fixed']} rules): " + t["all"].shares())
    if t["all"].n["likely"]:
        print("  " + t["all"].likely_line())
    if t["stated"].total() < n:
        # Collectors label threads that state no cause by what the log shows; a stated cause is
        # firmer ground for the label but not for agreement on it (whether a rule's cause is the
        # thread's): two labellers of unseen2-18 agreed on 84% of these and 88% of the rest.
        print(f"  of them {t['stated'].total()} whose thread states the cause: " + t["stated"].shares())
    if t["second"].total():
        print("  against a second labeller's labels: " + t["second"].shares())
        print(
            f"  the two labellers agree on {t['agreed'].total()} of {t['second'].total()}; on those: "
            + t["agreed"].shares()
        )
    return t


def goal_line(agreed: Tally, where: str) -> str:
    n = agreed.total() or 1
    wrong, right = agreed.n["wrong"] / n, agreed.n["right"] / n
    met = wrong <= GOAL_WRONG and right >= GOAL_RIGHT
    return (
        f"goal, on the {agreed.total()} logs of {where} whose labellers agree: wrong {100 * wrong:.1f}% "
        f"(<= {100 * GOAL_WRONG:.0f}%), right {100 * right:.1f}% (>= {100 * GOAL_RIGHT:.0f}%): "
        + ("met" if met else "NOT met")
    )


def _resolve(arg: str) -> Path:
    for cand in (Path(arg), Path.cwd() / arg, ROOT / arg, LOGS / arg):
        if (cand / "INDEX.yaml").is_file():
            return cand
    raise SystemExit(f"no split with an INDEX.yaml at {arg!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    ap.add_argument(
        "--split",
        action="append",
        default=[],
        metavar="DIR",
        help="folder holding the logs and their INDEX.yaml (default: tests/fixtures/logs/unseen); repeat for several",
    )
    ap.add_argument(
        "--splits",
        default="",
        metavar="A,B,...",
        help="several splits (folders, or names under tests/fixtures/logs), scored each and together",
    )
    args = ap.parse_args()
    names = [*args.split, *(x for x in args.splits.split(",") if x.strip())] or [str(UNSEEN)]
    splits = [_resolve(x.strip()) for x in names]
    as_rule = folded()
    total = {k: Tally() for k in ("all", "agreed")}
    for split in splits:
        t = score(split, args.quiet, as_rule)
        total["all"].merge(t["all"])
        total["agreed"].merge(t["agreed"])
        if t["agreed"].total():
            print("  " + goal_line(t["agreed"], split.name))
    if len(splits) > 1:
        where = " + ".join(s.name for s in splits)
        print(f"{total['all'].total()} logs in {where}: " + total["all"].shares())
        if total["all"].n["likely"]:
            print("  " + total["all"].likely_line())
        if total["agreed"].total():
            print(f"  where the labellers agree ({total['agreed'].total()}): " + total["agreed"].shares())
            if total["agreed"].n["likely"]:
                print("  " + total["agreed"].likely_line())
            print("  " + goal_line(total["agreed"], where))
    return 0


def _shares(counts: dict[str, int]) -> str:
    n = sum(counts.values()) or 1
    return ", ".join(f"{k} {v} ({100 * v / n:.0f}%)" for k, v in counts.items())


if __name__ == "__main__":
    raise SystemExit(main())
