"""`tune sweep`: each combination of the grid served by serve's own supervisor, its capacity
measured, then stopped. Results are appended as JSON lines as they come, so a sweep stopped by
Ctrl-C or a crash continues with --resume and repeats nothing measured.

A combination ends as one of:
- skipped: the memory plan (or the profile schema, or doctor) says it cannot run: never started;
- crashed: the engine exited or never got ready (the supervisor's diagnosis is kept), or died
  under load: a result like any other, the sweep goes on;
- measured: its capacity, as `tune capacity` finds it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from engine.errors import AscendctlError, BadInput
from engine.i18n import N_, _, shown
from engine.tune.grid import Combination

DONE = ("measured", "skipped", "crashed")


@dataclass
class SweepSetup:
    profile: str  # name or path, as given
    sets: Sequence[str]
    model: str | None
    scenario: str
    targets: Mapping[str, float]
    by: str
    results: Path
    ready_timeout: float = 900.0
    grace: float = 20.0
    meta: dict[str, Any] = field(default_factory=dict)  # what a resumed sweep must share with the first run


def read_results(path: Path) -> list[dict]:
    """The lines written so far; a torn last line (a kill mid-write) is ignored."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("status") in DONE:
            out.append(doc)
    return out


def check_resume(path: Path, resume: bool, meta: Mapping[str, Any]) -> list[dict]:
    """The results to keep. BadInput when the file holds a sweep of another setup, or when it
    holds results and --resume was not given (they would be mixed with a new sweep's)."""
    done = read_results(path)
    if done and not resume:
        raise BadInput(
            f"{path} already holds {len(done)} results of a sweep",
            "add --resume to continue it, or give another --results FILE",
        )
    for doc in done:
        theirs = doc.get("setup") or {}
        for key, value in meta.items():
            if theirs.get(key) != value:
                raise BadInput(
                    f"{path} holds a sweep with another {key} ({theirs.get(key)!r}, now {value!r})",
                    "resume with the same flags, or give another --results FILE",
                )
    return done


def append_result(path: Path, doc: Mapping[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(doc, default=str) + "\n")
        f.flush()


def result_doc(setup: SweepSetup, combo: Combination, status: str, **more) -> dict:
    return {
        "id": combo.id,
        "combination": dict(combo.settings),
        "status": status,
        "setup": setup.meta,
        "planned": dict(combo.planned),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **more,
    }


class Engine:
    """The narrow view of a supervised engine that the sweep needs (serve's Supervisor behind it;
    a test double in unit tests)."""

    def start(self) -> bool: ...  # started and ready

    def alive(self) -> bool: ...

    def failure(self) -> dict: ...  # exit code, diagnosis, run directory

    def shutdown(self) -> None: ...


@dataclass
class Sweeper:
    setup: SweepSetup
    combos: Sequence[Combination]
    launch: Callable[[Combination], Engine]  # a supervised engine for the combination, not started
    measure: Callable[[Combination, str], dict]  # capacity doc of the engine at url (raises Interrupted)
    url: str
    progress: Callable[[str], None]
    stop: threading.Event = field(default_factory=threading.Event)
    done: list[dict] = field(default_factory=list)
    estimate_s: float = 300.0  # a first guess at one combination, until one has been timed

    def run(self) -> tuple[list[dict], bool]:
        """Every combination not done yet. Returns all results and whether it was interrupted."""
        from engine.tune.search import Interrupted

        results = list(self.done)
        have = {d["id"] for d in results}
        todo = [c for c in self.combos if c.id not in have]
        n = len(self.combos)
        if have:
            self.progress(
                _("resuming: {done} of {n} combinations already done, {todo} to go").format(
                    done=len(have), n=n, todo=len(todo)
                )
            )
        timed: list[float] = []
        for combo in todo:
            pos = f"[{combo.index + 1}/{n}] {combo.label}"
            if self.stop.is_set():
                return results, True
            if combo.skipped:
                doc = result_doc(self.setup, combo, "skipped", reason=combo.skipped)
                append_result(self.setup.results, doc)
                results.append(doc)
                self.progress(_("{pos}: skipped, never started: {reason}").format(pos=pos, reason=shown(combo.skipped)))
                continue
            left = sum(1 for c in todo if not c.skipped and c.id not in {d["id"] for d in results}) - 1
            per = sum(timed) / len(timed) if timed else self.estimate_s
            self.progress(
                _("{pos}: starting the engine (ETA of the sweep ~{minutes} min)").format(
                    pos=pos, minutes=f"{(left + 1) * per / 60:.0f}"
                )
            )
            t0 = time.monotonic()
            engine = self.launch(combo)
            try:
                ready = engine.start()
                if self.stop.is_set():
                    return results, True
                if not ready:
                    doc = result_doc(self.setup, combo, "crashed", when="start-up", **engine.failure())
                else:
                    self.progress(_("{pos}: ready; measuring its capacity").format(pos=pos))
                    try:
                        cap = self.measure(combo, self.url)
                    except Interrupted:
                        return results, True
                    except AscendctlError:  # unreachable mid-search: a crash if the engine is gone
                        if engine.alive():
                            raise
                        cap = None
                    if not engine.alive():
                        doc = result_doc(self.setup, combo, "crashed", when="under load", **engine.failure())
                    else:
                        doc = result_doc(self.setup, combo, "measured", capacity=cap)
            finally:
                engine.shutdown()
            if self.stop.is_set() and doc["status"] != "measured":
                return results, True
            timed.append(time.monotonic() - t0)
            append_result(self.setup.results, doc)
            results.append(doc)
            self.progress(
                _("{pos}: {result} (took {seconds} s; {left} combinations to start)").format(
                    pos=pos, result=describe(doc), seconds=f"{timed[-1]:.0f}", left=left
                )
            )
        return results, False


# when a combination's engine crashed (the results file's "when"), for describe() to translate
WHEN = {"start-up": N_("start-up"), "under load": N_("under load")}


def describe(doc: Mapping[str, Any], measured: bool = True) -> str:
    """One combination's outcome for a person, in the messages' language ("measured: capacity
    4 concurrent"; without the "measured: " head when `measured` is False)."""
    status = doc["status"]
    if status == "skipped":
        return _("skipped: {reason}").format(reason=shown(doc.get("reason")))
    if status == "crashed":
        why = doc.get("diagnosis") or _("exit code {code}").format(code=doc.get("exit_code"))
        return _("crashed at {when}: {why}").format(when=_(WHEN.get(doc.get("when"), doc.get("when") or "")), why=why)
    cap = doc.get("capacity") or {}
    if cap.get("capacity") is None:
        text = _("the targets held at no load tried")
    else:
        band = f" ± {cap['band']:g}" if cap.get("band") else ""
        text = _("capacity {capacity}").format(
            capacity=f"{cap['capacity']:g}{band} {_(cap.get('unit') or '')}".rstrip()
        )
    return _("measured: {result}").format(result=text) if measured else text


def best(results: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The measured combination with the highest capacity (ties: more output tokens/s at it)."""

    def key(doc):
        cap = doc["capacity"]
        at = cap.get("at_capacity") or {}
        return (cap.get("capacity") or 0.0, (at.get("figures") or {}).get("output_tokens_per_s") or 0.0)

    measured = [d for d in results if d["status"] == "measured" and (d.get("capacity") or {}).get("capacity")]
    return max(measured, key=key) if measured else None


def pareto(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indexes of the points not dominated in both coordinates (higher is better in each)."""
    out = []
    for i, (x, y) in enumerate(points):
        if not any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i):
            out.append(i)
    return out
