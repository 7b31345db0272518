"""The profile and plan behind an engine `ascendctl serve` started: what its run directory's
resolved profile asked for, and the KV blocks `ascendctl plan` expects of it (the exporter's
`ascendctl_engine_kv_blocks{source="planned"}` and `top`'s engine screen both read this one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import AscendctlError
from engine.runs import LOG_FILE, PROFILE_FILE, RUN_FILE


@dataclass(frozen=True)
class RunProfile:
    profile: str
    model: str  # the model directory the engine loads
    served_name: str
    tensor_parallel: int
    pipeline_parallel: int | None
    data_parallel: int
    max_model_len: int | None  # None: the model's own limit
    max_num_seqs: int | None
    gpu_memory_utilization: float | None
    planned_blocks: int | None
    plan_error: str | None = None  # why there is no plan (the model is not on this host...)


def run_directory(log_path: str | None) -> Path | None:
    """The run directory of an engine whose log is `log_path`, when that is a run's log (the
    collector's targets from `ascendctl serve` runs carry it); None for an engine given by URL."""
    if not log_path:
        return None
    path = Path(log_path)
    return path.parent if path.name == LOG_FILE and (path.parent / RUN_FILE).is_file() else None


def run_profile(run_dir: Path) -> tuple[RunProfile | None, str | None]:
    """(the run's profile and plan, None), or (None, why it cannot be read)."""
    from engine.profiles import load_profile
    from engine.profiles.multinode import data_parallel_size

    path = Path(run_dir) / PROFILE_FILE
    if not path.is_file():
        return None, f"{path} is missing"
    try:
        profile = load_profile(str(path))
    except AscendctlError as exc:
        return None, exc.cause
    except Exception as exc:  # noqa: BLE001 - a damaged profile is a line on the screen, not a failure
        return None, f"{path}: {type(exc).__name__}: {exc}"
    blocks, why = _plan_blocks(profile)
    e = profile.engine
    return (
        RunProfile(
            profile=profile.name,
            model=profile.model.path,
            served_name=profile.model.served_name,
            tensor_parallel=e.tensor_parallel_size,
            pipeline_parallel=e.pipeline_parallel_size,
            data_parallel=data_parallel_size(profile),
            max_model_len=e.max_model_len,
            max_num_seqs=e.max_num_seqs,
            gpu_memory_utilization=e.gpu_memory_utilization,
            planned_blocks=blocks,
            plan_error=why,
        ),
        None,
    )


def planned_blocks(run_dir: Path) -> int | None:
    """The KV blocks `ascendctl plan` expects for the run's resolved profile; None when the
    profile or its model cannot be read here."""
    found, _ = run_profile(run_dir)
    return found.planned_blocks if found is not None else None


def _plan_blocks(profile) -> tuple[int | None, str | None]:
    try:
        from engine.capacity import plan

        return plan(profile).num_blocks, None
    except AscendctlError as exc:
        return None, exc.cause
    except Exception as exc:  # noqa: BLE001 - a plan that cannot be made is a missing figure, not a failure
        return None, f"{type(exc).__name__}: {exc}"
