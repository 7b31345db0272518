"""The --profile / --model / --set options as every command that takes a profile reads them
(plan, profile, serve, demo), so their help and their precedence read the same everywhere."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from engine.profiles import LaunchSpec, Profile

PRECEDENCE = "Precedence, lowest first: built-in defaults < the profile file < --model < each --set in order."
PROFILE_HELP = "Profile name (`ascendctl profile list`) or path to a YAML file."
MODEL_HELP = "Model directory; replaces the profile's model.path."
SET_HELP = "Override one key, SECTION.KEY=VALUE (e.g. engine.max_num_seqs=32); repeatable."


def load(profile: str, sets: Optional[Sequence[str]], model: Optional[str]) -> Profile:
    """The profile with the command line's overrides applied (raises BadInput with every problem)."""
    from engine.profiles import load_profile

    warn_skipped_user_profiles()
    return load_profile(profile, tuple(sets or ()), model=model)


def warn_skipped_user_profiles(read_files: bool = False) -> None:
    """Say on stderr which of the user's profiles were skipped (an unreadable folder, and with
    `read_files` a file that is not text), so a shipped profile still loads and the user knows why
    theirs did not."""
    from ascendctl.output import get_output
    from engine.profiles import user_profile_warnings

    for note in user_profile_warnings(read_files):
        get_output().warn(note)


def compat_warnings(prof: Profile) -> list[str]:
    """Settings of `prof` that no engine of its platform knows yet (they are dropped at launch)."""
    from engine.profiles.launch import unsupported_settings
    from engine.stacks.matrix import newest_engine

    return unsupported_settings(prof, newest_engine(prof.platform))


def resolve(profile: str, model: str | None, sets: list[str]) -> tuple[Profile, LaunchSpec, str | None]:
    """Profile -> launch spec for the engine interpreter next to ascendctl. Warns about flags the
    installed engine does not know (they are dropped, never passed blindly)."""
    from ascendctl.output import get_output
    from engine.profiles import launch_spec, load_profile
    from engine.system import Host
    from engine.system.enginepy import engine_interpreter, query_engine

    warn_skipped_user_profiles()
    prof = load_profile(profile, overrides=list(sets), model=model)
    host = Host()
    python = engine_interpreter(host)
    version = query_engine(host).vllm
    spec = launch_spec(prof, version, python)
    for reason in spec.dropped:
        get_output().warn(f"dropped {reason}")
    return prof, spec, version
