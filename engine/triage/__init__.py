"""Triage: explain logs of vLLM / vllm-ascend / CANN with a database of known issues.

Library API (used by `ascendctl triage`, by `serve` on a crash and by `top` on a live log):

    scanner = Scanner()
    for line in stream:
        scanner.feed(line, source="engine.log")
    report = scanner.report()          # TriageReport(issues=[IssueSummary...], unknown=[Template...])

    report = diagnose_lines(lines)     # the same in one call
    report = scan_paths(["plog/", "engine.log.gz", "-"])   # files, directories, .gz, stdin
"""

from engine.triage.codes import CodeInfo, explain, find_codes, reported_as
from engine.triage.model import SEVERITIES, IssueSummary, Template, TriageReport, severity_rank
from engine.triage.readers import scan_paths
from engine.triage.rules import Rule, load_rules
from engine.triage.scanner import Scanner, diagnose_lines

__all__ = [
    "SEVERITIES",
    "CodeInfo",
    "IssueSummary",
    "Rule",
    "Scanner",
    "Template",
    "TriageReport",
    "diagnose_lines",
    "explain",
    "find_codes",
    "reported_as",
    "load_rules",
    "scan_paths",
    "severity_rank",
]
