"""Load scenarios against an OpenAI-compatible server, with latency percentiles and SLO verdicts.

`load_scenario` reads a built-in scenario (long-doc, chat-qa, burst) or a YAML file;
`BenchRunner(url, scenario).run()` drives it and returns a `BenchReport`."""

from engine.bench.report import BenchReport, Verdict
from engine.bench.runner import BenchRunner, Progress, run_scenario
from engine.bench.scenario import Scenario, fit_context, list_scenarios, load_scenario, scaled, to_yaml, with_duration

__all__ = [
    "BenchReport",
    "BenchRunner",
    "Progress",
    "Scenario",
    "Verdict",
    "fit_context",
    "list_scenarios",
    "load_scenario",
    "run_scenario",
    "scaled",
    "to_yaml",
    "with_duration",
]
