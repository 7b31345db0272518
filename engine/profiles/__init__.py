"""Serving profiles: schema, loading with file:line problems, overrides, and argv + env resolution.

load_profile("910b-32b", ["engine.max_num_seqs=32"], model="/models/Qwen3-32B") -> Profile
launch_spec(profile, "0.32.0", sys.executable) -> LaunchSpec(argv, env, host, port, url, dropped)
"""

from engine.profiles.launch import LaunchSpec, launch_spec, parse_version
from engine.profiles.loader import (
    ProfileInvalid,
    ProfileRef,
    dump_profile,
    list_profiles,
    load_profile,
    load_profile_text,
    user_profile_warnings,
    user_profiles_dir,
)
from engine.profiles.schema import SCHEMA, Problem, Profile

__all__ = [
    "LaunchSpec",
    "Problem",
    "Profile",
    "ProfileInvalid",
    "ProfileRef",
    "SCHEMA",
    "dump_profile",
    "launch_spec",
    "list_profiles",
    "load_profile",
    "load_profile_text",
    "parse_version",
    "user_profile_warnings",
    "user_profiles_dir",
]
