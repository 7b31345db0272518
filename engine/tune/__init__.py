"""Tuning by measurement: the most load a server carries within its SLO, and the engine settings
that raise it.

- slo: `--slo ttft_p99=500ms,itl_p99=50ms` -> bench's SLO names and targets
- search: bracket, then bisect the load with repeats where the verdict is close (pure: takes a
  `measure(load)` function, so it is tested against a fake latency model)
- measure: one step of the search as one bench run (bench's client, phases and verdicts)
- grid: `--sweep KEY=V1,V2` checked against the profile schema, the combinations planned first
- sweep: each combination served by serve's supervisor, measured, stopped; results as JSON lines
- overlay: the best combination written as a profile that `serve -p` takes
"""
