"""The grid of a sweep: `--sweep engine.max_num_seqs=64,128` checked against the profile schema,
every combination resolved into a profile and planned before anything starts."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from engine.errors import AscendctlError, BadInput
from engine.i18n import DEFAULT, Msg, _, english, message_language
from engine.profiles.schema import SCHEMA, check_value, suggest
from engine.yamlfile import YamlInvalid, load

MAX_WITHOUT_YES = 64  # combinations: past this a sweep takes hours; --yes says it is meant


@dataclass(frozen=True)
class Axis:
    key: str  # SECTION.KEY
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Combination:
    index: int
    settings: Mapping[str, Any]  # key -> value, in the order of the axes
    skipped: str = ""  # the plan's reason when it does not fit: never started
    planned: Mapping[str, Any] = field(default_factory=dict)  # the plan's figures (KV tokens, concurrency)

    @property
    def id(self) -> str:
        """Stable across runs (what --resume matches on)."""
        return json.dumps(dict(self.settings), sort_keys=True, default=str)

    @property
    def label(self) -> str:
        return " ".join(f"{k.split('.')[-1]}={v}" for k, v in self.settings.items())

    def overrides(self) -> list[str]:
        return [f"{k}={_text(v)}" for k, v in self.settings.items()]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def known_keys() -> list[str]:
    return [f"{s}.{k}" if s else k for s, keys in SCHEMA.items() for k in keys]


def parse_axis(item: str) -> Axis:
    """`engine.max_num_seqs=64,128` -> Axis; BadInput for an unknown key, an empty list, a bad value."""
    key, eq, text = item.partition("=")
    key = key.strip()
    fix = _("use --sweep SECTION.KEY=V1,V2 with a profile key, e.g. --sweep engine.max_num_seqs=64,128")
    section, dot, name = key.rpartition(".")
    if not eq:
        raise BadInput(_("--sweep {item} has no values").format(item=repr(item)), fix)
    spec = None
    if section == "env":
        if not name:
            raise BadInput(
                _("--sweep {item}: env needs a variable name").format(item=repr(item)),
                "e.g. --sweep env.VLLM_CPU_OMP_THREADS_BIND=auto",
            )
    else:
        spec = SCHEMA.get(section, {}).get(name) if dot else None
        if spec is None or section == "":
            keys = [k for k in known_keys() if "." in k]
            raise BadInput(
                _("--sweep: {key} is not a profile key").format(key=repr(key)) + suggest(key, keys),
                _(
                    "see `ascendctl profile show PROFILE` or docs/profile-keys.md for the keys, e.g. engine.max_num_seqs"
                ),
            )
    raw = [v.strip() for v in text.split(",")]
    if not any(raw):
        raise BadInput(
            _("--sweep {key}= gives no values").format(key=key),
            _("give at least one: --sweep {key}=V1,V2").format(key=key),
        )
    if any(not v for v in raw):
        raise BadInput(
            _("--sweep {key}={values} has an empty value").format(key=key, values=text),
            _("separate the values with single commas"),
        )
    values = []
    for v in raw:
        try:
            parsed = load(v, f"--sweep {key}")
        except YamlInvalid:
            parsed = v
        if spec is not None:
            parsed, problem = check_value(spec, parsed)
            if problem:
                raise BadInput(
                    f"--sweep {key}: {v!r} {problem}",
                    _("give values the key takes: {values}").format(values=spec.describe()),
                )
        else:
            parsed = str(v)
        if parsed in values:
            raise BadInput(
                _("--sweep {key}: {value} is given twice").format(key=key, value=repr(v)), _("give each value once")
            )
        values.append(parsed)
    return Axis(key, tuple(values))


def default_grid(platform: str) -> list[str]:
    """The --sweep items measured when none is given (engine/tune/grids.yaml)."""
    from engine.data import load_yaml

    grids = load_yaml("engine.tune", "grids.yaml")
    grid = grids.get(platform)
    if not grid:
        raise BadInput(
            _("no default grid for platform {platform}").format(platform=platform),
            _("give the grid: --sweep engine.max_num_seqs=64,128 ..."),
        )
    return [f"{k}={','.join(str(v) for v in values)}" for k, values in grid.items()]


def parse_grid(items: Sequence[str], yes: bool = False) -> list[Axis]:
    if not items:
        raise BadInput(_("no --sweep given"), _("e.g. --sweep engine.max_num_seqs=64,128 (see docs/tune.md for grids)"))
    axes = [parse_axis(i) for i in items]
    seen = set()
    for a in axes:
        if a.key in seen:
            raise BadInput(
                _("--sweep {key} is given twice").format(key=a.key),
                _("give all its values in one --sweep {key}=V1,V2").format(key=a.key),
            )
        seen.add(a.key)
    n = grid_size(axes)
    if n > MAX_WITHOUT_YES and not yes:
        raise BadInput(
            _("the grid has {n} combinations (over {limit}): each one starts the engine and measures it").format(
                n=n, limit=MAX_WITHOUT_YES
            ),
            _("sweep fewer values, or add --yes if you mean it"),
        )
    return axes


def grid_size(axes: Sequence[Axis]) -> int:
    n = 1
    for a in axes:
        n *= len(a.values)
    return n


def combinations(axes: Sequence[Axis]) -> list[Combination]:
    return [
        Combination(i, dict(zip((a.key for a in axes), values)))
        for i, values in enumerate(itertools.product(*(a.values for a in axes)))
    ]


def plan_combination(combo: Combination, profile_ref: str, sets: Sequence[str], model: str | None):
    """The combination as a profile (the sweep's values after the user's --set), and its memory
    plan: (profile, combination with `skipped` set when the plan says it does not fit). A profile
    the schema refuses is skipped too, with the schema's words."""
    from dataclasses import replace

    from engine.capacity import NO_FIT, plan
    from engine.profiles import load_profile

    overrides = [*sets, *combo.overrides()]
    # The results file keeps English reasons; a person reads them in the messages' language, so a
    # refusal is made again for the progress line (a rare case: only a combination skipped).
    try:
        with english():
            prof = load_profile(profile_ref, overrides, model=model)
    except BadInput as exc:
        try:
            load_profile(profile_ref, overrides, model=model)
            cause = Msg(exc.cause)
        except BadInput as again:
            cause = Msg.pair(exc.cause, again.cause)
        return None, replace(combo, skipped=Msg("the profile refuses it: {cause}", cause=cause))
    try:
        with english():
            result = plan(prof)
    except AscendctlError:
        return prof, combo  # a plan that cannot be made does not stop a launch (as serve's preflight)
    figures = {
        "verdict": result.verdict,
        "kv_tokens": result.kv_tokens,
        "max_concurrency": round(result.max_concurrency, 2),
    }
    if result.verdict == NO_FIT:
        reasons = "; ".join(result.reasons)
        if message_language() != DEFAULT:
            reasons = Msg.pair(reasons, _("; ").join(plan(prof).reasons))
        return prof, replace(combo, skipped=Msg("does not fit: {reasons}", reasons=reasons), planned=figures)
    return prof, replace(combo, planned=figures)
