"""The profile schema: every key a profile may set, its type, range and default, as data.

A profile is YAML with the sections below. `validate()` turns a raw mapping (with the line of
each key) into a frozen `Profile`, collecting every problem instead of stopping at the first.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from engine.data import load_yaml
from engine.dtypes import ALIASES, canonical_dtype
from engine.i18n import N_, _
from engine.profiles.container import Container, container_section
from engine.profiles.roles import Role, roles_section
from engine.redact import MASK, is_secret_name, redact_env, redact_value
from engine.yamlfile import Problem, line_of, quote

PLATFORMS = ("ascend", "cuda", "cpu")
NODE_MODES = ("dp", "ray", "pd", "external-dp")
# The layouts started part by part (`serve --role`): roles, instances and a proxy.
PART_MODES = ("pd", "external-dp")
CONTAINER_RUNTIMES = ("auto", "docker", "podman", "nerdctl")  # engine.container.runtime.CHOICES
CONTAINER_DEVICES = ("auto", "ascend-runtime", "mounts", "gpus", "cdi", "none")
CONTAINER_NETWORKS = ("host", "publish")
# Every spelling of engine.dtype (vLLM's and the usual short ones); the profile keeps the canonical name.
DTYPES = tuple(ALIASES)
# --quantization methods a platform's engine has, where the list is short and fixed. vllm-ascend
# serves quantized weights only through its `ascend` method (msModelSlim W8A8 / W4A8 ...); AWQ,
# GPTQ and fp8 checkpoints made for CUDA are rejected when the weights load (vllm-ascend #1233).
QUANTIZATION = {"ascend": ("ascend",)}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Flags a profile must never smuggle in through extra_args: each has a reason and a better place.
FORBIDDEN_ARGS = {
    "--disable-log-stats": "it also removes every vllm:* metric from /metrics (top and plan need them)",
    "--api-key": "API keys never go on a command line: name the variable in server.api_key_env",
}


@dataclass(frozen=True)
class Spec:
    """One key of the schema."""

    kind: type | tuple[type, ...]
    default: Any = None
    required: bool = False
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_min: bool = False
    help: str = ""
    # Turns an accepted value into the one the profile keeps (an alias into its canonical name).
    convert: Callable[[Any], Any] | None = None
    # A string must match this (re.fullmatch), said as the second item when it does not.
    pattern: tuple[str, str] | None = None

    def describe(self) -> str:
        names = {
            int: _("an integer"),
            float: _("a number"),
            str: _("a string"),
            bool: _("true or false"),
            list: _("a list"),
            dict: _("a mapping"),
        }
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        text = names[float] if set(kinds) == {int, float} else _(" or ").join(names.get(k, k.__name__) for k in kinds)
        if self.choices:
            text = _("one of {choices}").format(choices=", ".join(str(c) for c in self.choices))
        if self.minimum is not None:
            text += f" {'>' if self.exclusive_min else '>='} {self.minimum:g}"
        if self.maximum is not None:
            text += f"{_(' and') if self.minimum is not None else ''} <= {self.maximum:g}"
        return text


NUMBER = (int, float)
# A Linux interface name (IFNAMSIZ: 15 characters; what `ip link` accepts and the HCCL/Gloo
# variables name).
IFNAME = (r"[A-Za-z0-9_.:\-]{1,15}", N_("an interface name: letters, digits, '_', '.', ':', '-', at most 15"))
ONE_LINE = (r"[^\x00-\x1f\x7f]+", N_("one line of text, without control characters"))

# section -> key -> Spec. `env` is a free mapping of variable names and is checked apart.
SCHEMA: dict[str, dict[str, Spec]] = {
    "": {
        "name": Spec(str, help="profile name (defaults to the file name)"),
        "description": Spec(str, default="", help="one line shown by `profile list`"),
        "platform": Spec(str, required=True, choices=PLATFORMS, help="which engine build runs it"),
    },
    "device": {
        "kind": Spec(str, default="", help="device model, e.g. 910B3, 910B4, Ascend910 (A3), 310P3, H100, cpu"),
        "hbm_gib": Spec(NUMBER, minimum=0, exclusive_min=True, help="memory of ONE device in GiB (not needed on cpu)"),
        "count": Spec(int, default=1, minimum=1, help="devices on the host"),
    },
    "model": {
        "path": Spec(
            str, required=True, pattern=ONE_LINE, help="model directory; ${cache} is the ascendctl cache dir, ~ is home"
        ),
        "served_name": Spec(
            str, pattern=ONE_LINE, help="name clients use in requests (defaults to the directory name)"
        ),
    },
    "engine": {
        "tensor_parallel_size": Spec(int, default=1, minimum=1, help="--tensor-parallel-size"),
        "pipeline_parallel_size": Spec(
            int, minimum=1, help="--pipeline-parallel-size: stages (with nodes.mode ray they span the hosts)"
        ),
        "enable_expert_parallel": Spec(
            bool, help="--enable-expert-parallel: MoE experts split over TP x DP ranks instead of TP"
        ),
        "dtype": Spec(
            str,
            default="auto",
            choices=DTYPES,
            convert=canonical_dtype,
            help="--dtype; half / fp16 mean float16, bf16 bfloat16, float / fp32 float32",
        ),
        "max_model_len": Spec(int, minimum=1, help="--max-model-len (default: the model's own limit)"),
        "max_num_seqs": Spec(int, minimum=1, help="--max-num-seqs"),
        "max_num_batched_tokens": Spec(int, minimum=1, help="--max-num-batched-tokens"),
        "block_size": Spec(int, minimum=1, help="--block-size (default: the platform's)"),
        "gpu_memory_utilization": Spec(
            NUMBER,
            minimum=0,
            exclusive_min=True,
            maximum=1,
            help="--gpu-memory-utilization: share of each device's memory",
        ),
        "enforce_eager": Spec(bool, default=False, help="--enforce-eager (no graph capture; faster start)"),
        "quantization": Spec(
            str,
            help="--quantization. ascend: only `ascend` (msModelSlim W8A8 / W4A8 weights); "
            "cuda: vLLM's methods, e.g. awq, gptq, fp8; cpu: e.g. awq, gptq",
        ),
        "kv_cache_dtype": Spec(str, default="auto", help="--kv-cache-dtype, e.g. auto, fp8"),
        "kv_offloading_size": Spec(
            NUMBER,
            minimum=0,
            exclusive_min=True,
            help="--kv-offloading-size: GiB of host DRAM for cold KV blocks (all ranks)",
        ),
        "max_num_queued_reqs": Spec(
            int, minimum=1, help="--max-num-queued-reqs: reject new requests beyond this queue"
        ),
        "max_num_queued_tokens": Spec(int, minimum=1, help="--max-num-queued-tokens: same, counted in prompt tokens"),
        "cpu_kvcache_space_gib": Spec(int, minimum=1, help="cpu only: KV cache GiB (VLLM_CPU_KVCACHE_SPACE)"),
        "kv_cache_memory_bytes": Spec(
            int,
            minimum=1,
            help="--kv-cache-memory-bytes: the KV cache's exact size in bytes, instead of a memory share "
            "(on cpu, leave cpu_kvcache_space_gib unset: its variable would win)",
        ),
        "extra_args": Spec(list, default=(), help="more engine flags, passed as they are"),
    },
    "server": {
        "host": Spec(str, default="127.0.0.1", help="--host (127.0.0.1 unless you mean to expose it)"),
        "port": Spec(int, default=8000, minimum=1, maximum=65535, help="--port"),
        "api_key_env": Spec(str, help="name of the variable holding the API key; passed as VLLM_API_KEY"),
    },
    "diagnostics": {
        "pending_threshold": Spec(int, default=128, minimum=0, help="waiting requests that `top` flags"),
        "kv_usage_warn": Spec(NUMBER, default=0.9, minimum=0, maximum=1, help="KV cache usage (0-1) that `top` flags"),
        "hbm_bandwidth_warn_pct": Spec(
            NUMBER, default=95, minimum=0, maximum=100, help="sustained HBM bandwidth % that suggests quantization"
        ),
        "temperature_warn_c": Spec(NUMBER, default=85, minimum=0, help="device temperature that `top` flags"),
        **{
            key: Spec(NUMBER, minimum=0, exclusive_min=True, help=f"hang verdict: {what} (thresholds.yaml's {key})")
            for key, what in (
                ("hang_probe_interval_s", "seconds between probes while no token flows"),
                ("hang_probe_timeout_s", "shortest probe timeout, seconds"),
                ("hang_probe_failures", "probe failures in a row that make a hang"),
                ("hang_progress_s", "seconds of requests in and no token generated"),
                ("hang_cpu_s", "seconds the engine's processes use no CPU while requests wait"),
                ("hang_device_s", "seconds the NPUs stay idle with HBM unchanged while requests run"),
            )
        },
    },
    "nodes": {
        "count": Spec(
            int,
            required=True,
            minimum=1,
            help="hosts in the layout (a profile without `nodes` uses one); 2 or more in modes dp and ray, "
            "1 or more in pd and external-dp",
        ),
        "devices_per_host": Spec(int, minimum=1, help="devices each host gives the layout (default: device.count)"),
        "mode": Spec(
            str,
            default="dp",
            choices=NODE_MODES,
            help="dp: vLLM data parallel, one engine per host (node 0 serves the API, the others run --headless); "
            "ray: a Ray cluster, one vllm serve with --distributed-executor-backend ray on node 0; "
            "pd: prefill / decode disaggregation (nodes.roles, a KV connector, a proxy; docs/pd.md); "
            "external-dp: one API server per data-parallel rank and a balancer in front",
        ),
        "addresses": Spec(
            list,
            help="one IP address per host in rank order: each host's HCCL_IF_IP; the first is the DP master "
            "(--data-parallel-address) or the Ray head",
        ),
        "nic": Spec(
            str,
            pattern=IFNAME,
            help="name of the network interface that holds those addresses: GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME "
            "and HCCL_SOCKET_IFNAME on every host",
        ),
        "dp_rpc_port": Spec(
            int, default=29550, minimum=1, maximum=65535, help="--data-parallel-rpc-port, the same on every host"
        ),
        "ray_port": Spec(int, default=6379, minimum=1, maximum=65535, help="port of the Ray head (GCS)"),
        "hccl_buffsize": Spec(int, minimum=1, help="HCCL_BUFFSIZE on every host: MB per communicator buffer"),
        "hccl_connect_timeout": Spec(
            int,
            minimum=1,
            help="HCCL_CONNECT_TIMEOUT on every host: seconds a rank waits for its peers' links (HCCL's default: "
            "120); `plan` warns when the weight load takes longer",
        ),
        "hosts": Spec(
            list,
            default=(),
            help="overrides per host, in rank order: a list of mappings with `nic` and `env` (variables for that "
            "host only)",
        ),
        "roles": Spec(
            list,
            default=(),
            help="mode pd: the prefill and decode instances, a list of mappings with role (prefill | decode), host "
            "(node rank), devices (NPU ids), port, tensor_parallel_size, dp_group, kv_port, dp_rpc_port, engine (keys of "
            "the engine section for this role) and env (docs/pd.md)",
        ),
        "kv_connector": Spec(
            str,
            help="mode pd: the KV connector's name as the installed vLLM registers it (default on ascend: "
            "MooncakeConnectorV1, as vllm-ascend's PD tutorials)",
        ),
        "kv_connector_extra": Spec(
            dict, default={}, help="mode pd: more kv_connector_extra_config settings, merged into the generated ones"
        ),
        "instance_port": Spec(
            int,
            default=7100,
            minimum=1,
            maximum=65535,
            help="mode external-dp: API port of a host's first rank, the next ones counting up (the tutorials' "
            "vllm-start-port); the balancer listens on server.port",
        ),
    },
    "container": {
        "image": Spec(
            str,
            help="image to run (default: the official vllm-ascend image for this chip and OS, "
            "quay.io/ascend/vllm-ascend:v<release>[-a3|-310p|-a5][-openeuler]; on cuda vllm/vllm-openai:v<vLLM>)",
        ),
        "runtime": Spec(
            str,
            default="auto",
            choices=CONTAINER_RUNTIMES,
            help="auto: the first of docker, podman, nerdctl that is installed and answers",
        ),
        "python": Spec(str, default="python3", help="the engine's interpreter inside the image"),
        "devices": Spec(
            str,
            default="auto",
            choices=CONTAINER_DEVICES,
            help="how the container gets its accelerators. ascend-runtime: Ascend Docker Runtime (--runtime ascend "
            "and ASCEND_VISIBLE_DEVICES); mounts: the vllm-ascend quick start's --device /dev/davinciN per NPU, "
            "davinci_manager, devmm_svm, hisi_hdc and the driver mounts; gpus: --gpus (podman: CDI); cdi: "
            "--device nvidia.com/gpu=N; none. auto: mounts on ascend, gpus on cuda, none on cpu",
        ),
        "visible_devices": Spec(
            list,
            help="the NPU / GPU ids the container gets (default: 0 .. the profile's TP x PP - 1)",
        ),
        "runtime_options": Spec(str, help="ASCEND_RUNTIME_OPTIONS with devices: ascend-runtime, e.g. NODRV or VIRTUAL"),
        "shm_size": Spec(
            str,
            help="--shm-size, e.g. 1g (default: 1g as the vllm-ascend docs, 10g on 310P, 1g per rank "
            "when the profile runs several)",
        ),
        "cache_dir": Spec(
            str, help="host directory mounted read-write at /root/.cache (the docs' -v /root/.cache:/root/.cache)"
        ),
        "volumes": Spec(list, default=(), help="more mounts, each HOST:CONTAINER or HOST:CONTAINER:ro"),
        "pass_env": Spec(
            list,
            default=(),
            help="names of variables passed from ascendctl's environment (-e NAME: the value never "
            "lands on a command line)",
        ),
        "network": Spec(
            str,
            default="host",
            choices=CONTAINER_NETWORKS,
            help="host: the host's network (--network host); publish: -p server.host:port:port, the "
            "engine listening on 0.0.0.0 inside",
        ),
        "user": Spec(str, help="--user, e.g. 1000:1000 (default: the image's)"),
    },
}
SECTIONS = tuple(s for s in SCHEMA if s) + ("env",)
# Sections that are absent unless the profile has them (one host: no layout; no image: the host).
OPTIONAL_SECTIONS = ("nodes", "container")
# Keys whose value is not a scalar or a list of scalars; build() checks them itself.
NESTED_KEYS = {"nodes.hosts", "nodes.roles", "nodes.kv_connector_extra"}
HOST_KEYS = ("nic", "env")
# The variables a nodes section sets on each host, and the key that sets them.
NODE_ENV_KEYS = {
    "HCCL_IF_IP": "nodes.addresses",
    "GLOO_SOCKET_IFNAME": "nodes.nic",
    "TP_SOCKET_IFNAME": "nodes.nic",
    "HCCL_SOCKET_IFNAME": "nodes.nic",
    "HCCL_BUFFSIZE": "nodes.hccl_buffsize",
    "HCCL_CONNECT_TIMEOUT": "nodes.hccl_connect_timeout",
}


@dataclass(frozen=True)
class Device:
    kind: str = ""
    hbm_gib: float | None = None
    count: int = 1


@dataclass(frozen=True)
class Model:
    path: str = ""
    served_name: str = ""


@dataclass(frozen=True)
class Engine:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int | None = None
    enable_expert_parallel: bool | None = None
    dtype: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    gpu_memory_utilization: float | None = None
    enforce_eager: bool = False
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    kv_offloading_size: float | None = None
    max_num_queued_reqs: int | None = None
    max_num_queued_tokens: int | None = None
    cpu_kvcache_space_gib: int | None = None
    kv_cache_memory_bytes: int | None = None
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Server:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key_env: str | None = None


@dataclass(frozen=True)
class Diagnostics:
    pending_threshold: int = 128
    kv_usage_warn: float = 0.9
    hbm_bandwidth_warn_pct: float = 95
    temperature_warn_c: float = 85
    hang_probe_interval_s: float | None = None
    hang_probe_timeout_s: float | None = None
    hang_probe_failures: float | None = None
    hang_progress_s: float | None = None
    hang_cpu_s: float | None = None
    hang_device_s: float | None = None


@dataclass(frozen=True)
class Host:
    """What one host of a layout changes: its interface name and extra variables."""

    nic: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Nodes:
    """A layout over several hosts (the `nodes` section). Host K is node rank K."""

    count: int
    devices_per_host: int
    mode: str = "dp"
    addresses: tuple[str, ...] = ()
    nic: str | None = None
    dp_rpc_port: int = 29550
    ray_port: int = 6379
    hccl_buffsize: int | None = None
    hccl_connect_timeout: int | None = None
    hosts: tuple[Host, ...] = ()
    roles: tuple[Role, ...] = ()
    kv_connector: str | None = None
    kv_connector_extra: Mapping[str, Any] = field(default_factory=dict)
    instance_port: int = 7100

    def host(self, rank: int) -> Host:
        return self.hosts[rank] if rank < len(self.hosts) else Host()

    @property
    def in_parts(self) -> bool:
        """A layout started part by part (PART_MODES): roles, instances and a proxy."""
        return self.mode in PART_MODES

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "hosts":
                value = [{k: v for k, v in (("nic", h.nic), ("env", redact_env(h.env))) if v} for h in self.hosts]
            elif f.name == "roles":
                value = [role.to_dict() for role in self.roles]
            elif f.name == "instance_port" and self.mode != "external-dp":
                continue  # the key of one mode only
            elif f.name == "kv_connector_extra":
                value = dict(value) or None
            elif isinstance(value, tuple):
                value = list(value)
            if value is not None and value != []:
                out[f.name] = value
        return out


@dataclass(frozen=True)
class Profile:
    """A validated serving profile. `source` is the file it came from, `overrides` what changed it."""

    name: str
    platform: str
    description: str = ""
    device: Device = field(default_factory=Device)
    model: Model = field(default_factory=Model)
    engine: Engine = field(default_factory=Engine)
    env: Mapping[str, str] = field(default_factory=dict)
    server: Server = field(default_factory=Server)
    diagnostics: Diagnostics = field(default_factory=Diagnostics)
    nodes: Nodes | None = None
    container: Container | None = None
    source: str = ""
    overrides: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The profile as YAML-able sections (what `profile show` prints and serve saves)."""
        out: dict[str, Any] = {"name": self.name, "description": self.description, "platform": self.platform}
        for section in ("device", "model", "engine", "server", "diagnostics"):
            part = getattr(self, section)
            values = {f.name: getattr(part, f.name) for f in fields(part)}
            out[section] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items() if v is not None}
        # This is what `profile show` prints and what serve saves into the run directory: a token
        # put into env (or given with --set env.HF_TOKEN=...) must not land there in plain text.
        out["env"] = redact_env(self.env)
        if self.nodes is not None:
            out["nodes"] = self.nodes.to_dict()
        if self.container is not None:
            out["container"] = self.container.to_dict()
        return out

    def masked_overrides(self) -> list[str]:
        """The overrides as they may be printed or saved: a secret env value given with --set masked."""
        return [mask_override(item) for item in self.overrides]


def mask_override(item: str) -> str:
    """`env.HF_TOKEN=hf_abc` -> `env.HF_TOKEN=****`; credentials inside any other value masked."""
    key, eq, value = item.partition("=")
    name = key.strip().rpartition(".")[2]
    if eq and key.strip().startswith("env.") and is_secret_name(name) and value:
        return f"{key}={MASK}"
    return redact_value(item)


_SECTION_TYPES: dict[str, Callable[..., Any]] = {
    "device": Device,
    "model": Model,
    "engine": Engine,
    "server": Server,
    "diagnostics": Diagnostics,
}


def removed_args() -> dict[str, dict[str, str]]:
    """Flags vLLM removed, each with the release that dropped it and what to use instead."""
    return load_yaml("engine.profiles", "removed_flags.yaml")


def suggest(word: str, known: list[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return _(" (did you mean {word}?)").format(word=repr(close[0])) if close else ""


def _must_be() -> str:
    return _("must be {kind}, got {value}")


def check_value(spec: Spec, value: Any) -> tuple[Any, str | None]:
    """The value converted to the spec's type, or an error message."""
    kinds = spec.kind if isinstance(spec.kind, tuple) else (spec.kind,)
    if value is None:
        return None, (_("is required") if spec.required else None)
    # bool is an int in Python; a YAML `true` must not pass as a count.
    if isinstance(value, bool) and bool not in kinds:
        return value, _must_be().format(kind=spec.describe(), value=quote(value))
    if not isinstance(value, kinds):
        if str in kinds and isinstance(value, (int, float)):
            value = str(value)
        else:
            return value, _must_be().format(kind=spec.describe(), value=quote(value))
    if list in kinds:
        if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
            return value, _("must be a list of strings")
        value = tuple(str(v) for v in value)
    if spec.pattern is not None and isinstance(value, str) and not re.fullmatch(spec.pattern[0], value):
        return value, _must_be().format(kind=_(spec.pattern[1]), value=quote(value))
    if spec.choices and value not in spec.choices:
        return (
            value,
            _must_be().format(kind=spec.describe(), value=quote(value))
            + suggest(str(value), [str(c) for c in spec.choices]),
        )
    if isinstance(value, float) and not math.isfinite(value):
        # YAML reads .nan and .inf as floats; NaN fails no comparison, so the range test below
        # would let it through to the planner and the engine.
        return value, _("must be a finite number, got {value}").format(value=quote(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low_bad = spec.minimum is not None and (value <= spec.minimum if spec.exclusive_min else value < spec.minimum)
        high_bad = spec.maximum is not None and value > spec.maximum
        if low_bad or high_bad:
            return value, _must_be().format(kind=spec.describe(), value=quote(value))
    if spec.convert is not None:
        value = spec.convert(value)
    return value, None


Locate = Callable[[str], tuple[str, int | None]]


def build(raw: Mapping[str, Any], locate: Locate, default_name: str) -> tuple[Profile | None, list[Problem]]:
    """Check `raw` (section -> key -> value; top-level keys under "") against the schema.

    `locate(dotted_key)` names where a key came from: (file, line), or (the --set, None); every
    problem is kept.
    """
    problems: list[Problem] = []
    values: dict[str, dict[str, Any]] = {}
    for section, specs in SCHEMA.items():
        if section in OPTIONAL_SECTIONS and section not in raw:
            continue  # one host, no layout; no container: nothing required
        given = dict(raw.get(section) or {})
        out: dict[str, Any] = {}
        for key, value in given.items():
            dotted = f"{section}.{key}" if section else key
            spec = specs.get(key)
            if spec is None:
                known = list(specs) + ([s for s in SECTIONS] if not section else [])
                problems.append(Problem(*locate(dotted), dotted, _("unknown key") + suggest(key, known)))
                continue
            if dotted in NESTED_KEYS:
                out[key] = value
                continue
            checked, error = check_value(spec, value)
            if error:
                problems.append(Problem(*locate(dotted), dotted, error))
            elif checked is not None:  # an empty value (`key:` or --set KEY=null) means the default
                out[key] = checked
        for key, spec in specs.items():
            if key not in out:
                dotted = f"{section}.{key}" if section else key
                if spec.required and not any(p.key == dotted for p in problems):
                    problems.append(Problem(*locate(section or dotted), dotted, _("is required")))
                elif spec.default is not None:
                    out[key] = spec.default
        values[section] = out

    env: dict[str, str] = {}
    for key, value in dict(raw.get("env") or {}).items():
        where = locate(f"env.{key}")
        if not ENV_NAME.match(str(key)):
            problems.append(Problem(*where, f"env.{key}", "is not a valid environment variable name"))
        elif str(key) == "VLLM_API_KEY":
            problems.append(
                Problem(
                    *where,
                    "env.VLLM_API_KEY",
                    "keys never live in a profile: set server.api_key_env to the name of the variable that holds it",
                )
            )
        elif isinstance(value, (dict, list)) or value is None:
            problems.append(Problem(*where, f"env.{key}", f"must be a string, got {quote(value)}"))
        else:
            env[str(key)] = ("1" if value else "0") if isinstance(value, bool) else str(value)

    nodes: Nodes | None = None
    if "nodes" in values:
        nodes, more = _nodes(values, env, locate)
        problems.extend(more)
    problems.extend(_cross_checks(values, locate))
    container: Container | None = None
    if "container" in values:
        container, more = container_section(values, locate)
        problems.extend(more)
    if problems:
        return None, problems

    top = values[""]
    model = values["model"]
    if not model.get("served_name"):
        model["served_name"] = model["path"].rstrip("/").rsplit("/", 1)[-1] or "model"
    sections = {name: cls(**values[name]) for name, cls in _SECTION_TYPES.items()}
    profile = Profile(
        name=top.get("name") or default_name,
        platform=top["platform"],
        description=top.get("description", ""),
        env=env,
        nodes=nodes,
        container=container,
        **sections,
    )
    return profile, []


def _env_problems(
    mapping: Any, key: str, where: tuple[str, int | None], lines: Any
) -> tuple[dict[str, str], list[Problem]]:
    """A mapping of environment variables checked like the `env` section; `lines` gives each name's line."""
    if not isinstance(mapping, dict):
        return {}, [Problem(*where, key, f"must be a mapping of variable names to values, got {quote(mapping)}")]
    env: dict[str, str] = {}
    problems: list[Problem] = []
    for name, value in mapping.items():
        at = (where[0], line_of(lines, name) or where[1]) if where[1] is not None else where
        if not ENV_NAME.match(str(name)):
            problems.append(Problem(*at, f"{key}.{name}", "is not a valid environment variable name"))
        elif str(name) == "VLLM_API_KEY":
            problems.append(Problem(*at, f"{key}.{name}", "keys never live in a profile: set server.api_key_env"))
        elif isinstance(value, (dict, list)) or value is None:
            problems.append(Problem(*at, f"{key}.{name}", f"must be a string, got {quote(value)}"))
        else:
            env[str(name)] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return env, problems


def _nodes(
    values: dict[str, dict[str, Any]], env: Mapping[str, str], locate: Locate
) -> tuple[Nodes | None, list[Problem]]:
    """The `nodes` section as a Nodes, with what its keys say together (hosts, addresses, variables)."""
    problems: list[Problem] = []
    given = values["nodes"]
    if "count" not in given:
        return None, problems  # "is required" is already said
    count = given["count"]
    addresses = tuple(given.get("addresses", ()))
    if addresses:
        where = locate("nodes.addresses")
        if len(addresses) != count:
            problems.append(
                Problem(*where, "nodes.addresses", f"lists {len(addresses)} address(es) for nodes.count {count} hosts")
            )
        for address in addresses:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                problems.append(
                    Problem(*where, "nodes.addresses", f"{quote(address)} is not an IP address (HCCL_IF_IP needs one)")
                )
    hosts: list[Host] = []
    raw_hosts = given.get("hosts", ())
    where = locate("nodes.hosts")
    if not isinstance(raw_hosts, (list, tuple)):
        problems.append(Problem(*where, "nodes.hosts", f"must be a list of mappings, got {quote(raw_hosts)}"))
        raw_hosts = ()
    elif len(raw_hosts) > count:
        problems.append(Problem(*where, "nodes.hosts", f"lists {len(raw_hosts)} hosts for nodes.count {count}"))
    for i, item in enumerate(raw_hosts):
        key = f"nodes.hosts[{i}]"
        at = (where[0], line_of(raw_hosts, i) or where[1]) if where[1] is not None else where
        if item is None:
            hosts.append(Host())
            continue
        if not isinstance(item, dict):
            problems.append(Problem(*at, key, f"must be a mapping with {' and '.join(HOST_KEYS)}, got {quote(item)}"))
            continue
        for name in item:
            if name not in HOST_KEYS:
                line = (at[0], line_of(item, name) or at[1]) if at[1] is not None else at
                problems.append(Problem(*line, f"{key}.{name}", _("unknown key") + suggest(str(name), list(HOST_KEYS))))
        nic = item.get("nic")
        if nic is not None and not isinstance(nic, str):
            problems.append(Problem(*at, f"{key}.nic", f"must be a string, got {quote(nic)}"))
            nic = None
        elif nic is not None and not re.fullmatch(IFNAME[0], nic):
            problems.append(Problem(*at, f"{key}.nic", f"must be {IFNAME[1]}, got {quote(nic)}"))
            nic = None
        host_env, more = _env_problems(item.get("env") or {}, f"{key}.env", at, item.get("env"))
        problems.extend(more)
        hosts.append(Host(nic=nic, env=host_env))
    set_by = {
        "nodes.addresses": bool(addresses),
        "nodes.nic": given.get("nic") is not None,
        "nodes.hccl_buffsize": given.get("hccl_buffsize") is not None,
        "nodes.hccl_connect_timeout": given.get("hccl_connect_timeout") is not None,
    }
    for name, owner in NODE_ENV_KEYS.items():
        if name in env and set_by[owner]:
            problems.append(Problem(*locate(f"env.{name}"), f"env.{name}", f"is set by {owner}: set it in one place"))
    nodes = Nodes(
        count=count,
        devices_per_host=given.get("devices_per_host") or values["device"].get("count", 1),
        mode=given.get("mode", "dp"),
        addresses=addresses,
        nic=given.get("nic"),
        dp_rpc_port=given.get("dp_rpc_port", 29550),
        ray_port=given.get("ray_port", 6379),
        hccl_buffsize=given.get("hccl_buffsize"),
        hccl_connect_timeout=given.get("hccl_connect_timeout"),
        hosts=tuple(hosts),
        instance_port=given.get("instance_port", 7100),
    )
    if nodes.in_parts:
        nodes, more = roles_section(nodes, given, values, locate)
        problems.extend(more)
    return nodes, problems


def _cross_checks(values: dict[str, dict[str, Any]], locate: Locate) -> list[Problem]:
    """Rules between keys: what a single key's spec cannot say."""
    problems: list[Problem] = []
    platform = values[""].get("platform")
    device, engine, server = values["device"], values["engine"], values["server"]
    if platform in ("ascend", "cuda") and device.get("hbm_gib") is None:
        problems.append(
            Problem(
                *locate("device"),
                "device.hbm_gib",
                _("is required on {platform}: the memory of one device in GiB").format(platform=platform),
            )
        )
    nodes = values.get("nodes")
    if nodes is not None and "count" in nodes:
        problems.extend(_layout_checks(values, locate))
    elif platform in ("ascend", "cuda"):
        tp, count = engine.get("tensor_parallel_size", 1), device.get("count", 1)
        if tp > count:
            problems.append(
                Problem(
                    *locate("engine.tensor_parallel_size"),
                    "engine.tensor_parallel_size",
                    f"{tp} is more than device.count ({count})",
                )
            )
    if platform != "cpu" and engine.get("cpu_kvcache_space_gib") is not None:
        problems.append(
            Problem(
                *locate("engine.cpu_kvcache_space_gib"),
                "engine.cpu_kvcache_space_gib",
                "only applies to platform cpu; use engine.gpu_memory_utilization",
            )
        )
    if "310p" in str(device.get("kind", "")).lower() and engine.get("dtype") == "bfloat16":
        problems.append(
            Problem(
                *locate("engine.dtype"),
                "engine.dtype",
                "310P runs float16 only (bfloat16 kernels are not implemented there): use float16",
            )
        )
    quantization = engine.get("quantization")
    methods = QUANTIZATION.get(str(platform))
    if quantization is not None and methods is not None and quantization not in methods:
        problems.append(
            Problem(
                *locate("engine.quantization"),
                "engine.quantization",
                f"{quote(quantization)} does not run on {platform}: vllm-ascend serves quantized models only "
                "through its `ascend` method, from msModelSlim W8A8 / W4A8 weights (AWQ and GPTQ checkpoints are "
                "refused); quantize the model with msModelSlim and set engine.quantization: ascend",
            )
        )
    elif quantization == "ascend" and platform != "ascend":
        problems.append(
            Problem(
                *locate("engine.quantization"),
                "engine.quantization",
                f"`ascend` is vllm-ascend's method and does not exist on {platform}; use one of vLLM's (awq, gptq, ...)",
            )
        )
    removed = removed_args()
    for arg in engine.get("extra_args", ()):
        flag = arg.split("=", 1)[0]
        if flag in FORBIDDEN_ARGS:
            problems.append(
                Problem(*locate("engine.extra_args"), "engine.extra_args", f"{flag}: {FORBIDDEN_ARGS[flag]}")
            )
        elif flag in removed:
            fact = removed[flag]
            problems.append(
                Problem(
                    *locate("engine.extra_args"),
                    "engine.extra_args",
                    f"{flag} was removed from vLLM (gone by {fact['removed']}): {fact['instead']}",
                )
            )
    key_env = server.get("api_key_env")
    if key_env is not None and not ENV_NAME.match(key_env):
        problems.append(
            Problem(
                *locate("server.api_key_env"),
                "server.api_key_env",
                f"must be the NAME of an environment variable, got {quote(key_env)}",
            )
        )
    return problems


def _layout_checks(values: dict[str, dict[str, Any]], locate: Locate) -> list[Problem]:
    """How the parallel sizes fit a layout of several hosts."""
    problems: list[Problem] = []
    platform = values[""].get("platform")
    device, engine, nodes = values["device"], values["engine"], values["nodes"]
    # cpu: vLLM's CPU engine runs data parallel over hosts too (gloo), which lets a layout be tried
    # on one machine; cuda layouts are another tool's job.
    if platform not in ("ascend", "cpu"):
        problems.append(
            Problem(
                *locate("nodes"),
                "nodes",
                f"multi-host layouts are for platform ascend (and cpu, to try one out), not {platform}",
            )
        )
    count = nodes["count"]
    per_host = nodes.get("devices_per_host") or device.get("count", 1)
    if per_host > device.get("count", 1):
        problems.append(
            Problem(
                *locate("nodes.devices_per_host"),
                "nodes.devices_per_host",
                f"{per_host} is more than device.count ({device.get('count', 1)})",
            )
        )
    tp = engine.get("tensor_parallel_size", 1)
    pp = engine.get("pipeline_parallel_size") or 1
    mode = nodes.get("mode", "dp")
    if mode in ("dp", "ray") and count < 2:
        problems.append(Problem(*locate("nodes.count"), "nodes.count", f"must be an integer >= 2 in mode {mode}"))
    if mode == "pd":
        return problems  # each role states its own parallelism (engine/profiles/roles.py checks it)
    if mode in ("dp", "external-dp"):
        if (tp * pp) > per_host or per_host % (tp * pp):
            problems.append(
                Problem(
                    *locate("engine.tensor_parallel_size"),
                    "engine.tensor_parallel_size",
                    f"mode {mode} runs whole replicas on each host: TP {tp} x PP {pp} must divide the {per_host} "
                    "devices of a host",
                )
            )
    elif tp * pp != count * per_host:
        problems.append(
            Problem(
                *locate("engine.tensor_parallel_size"),
                "engine.tensor_parallel_size",
                f"mode ray spreads one replica over every host: TP {tp} x PP {pp} = {tp * pp} must equal "
                f"{count} hosts x {per_host} devices = {count * per_host} (the tutorial's way: TP = devices per "
                "host, PP = hosts)",
            )
        )
    return problems
