"""Find, read and validate profiles, keeping the line of every key so problems point at it.

Precedence (lowest first): schema defaults < the profile file < --model < each --set in order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import platformdirs
import yaml

from engine import yamlfile
from engine.errors import BadInput
from engine.i18n import _
from engine.profiles.schema import SCHEMA, SECTIONS, Problem, Profile, build, mask_override, suggest

PROFILE_SUFFIXES = (".yaml", ".yml")
CACHE_PLACEHOLDER = "${cache}"


class ProfileInvalid(BadInput):
    """A profile with problems; `problems` lists each one with file:line and key."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  {p}" for p in problems)
        if len(problems) == 1:
            head = _("invalid profile {source} (1 problem):").format(source=source)
        else:
            head = _("invalid profile {source} ({count} problems):").format(source=source, count=len(problems))
        super().__init__(f"{head}\n{lines}", _fix_for(source, problems))


def _fix_for(source: str, problems: list[Problem]) -> str:
    """Point at what gave the bad values: the command line's --set / --model, the file, or both.
    A bad --set on a shipped profile must not send the user to edit the installed file."""
    flags = list(dict.fromkeys(p.file for p in problems if p.line is None and p.file.startswith("--")))
    in_file = [p for p in problems if not (p.line is None and p.file.startswith("--"))]
    if flags and not in_file:
        return _("correct {flags} on the command line (`ascendctl profile show` lists the keys)").format(
            flags=" and ".join(flags)
        )
    edit = (
        _("edit {source} (see `ascendctl profile show` for a valid example)").format(source=source)
        if source
        else _("fix the profile")
    )
    return _("{edit}, and correct {flags}").format(edit=edit, flags=" and ".join(flags)) if flags else edit


@dataclass(frozen=True)
class ProfileRef:
    """A profile `list_profiles()` found: where it lives and whether it ships with ascendctl."""

    name: str
    path: str
    shipped: bool
    description: str = ""
    platform: str = ""


def user_profiles_dir() -> Path:
    """ASCENDCTL_PROFILES_DIR, else <user config dir>/profiles (~/.config/ascendctl/profiles)."""
    override = os.environ.get("ASCENDCTL_PROFILES_DIR")
    return Path(override) if override else Path(platformdirs.user_config_dir("ascendctl")) / "profiles"


def _shipped() -> dict[str, Any]:
    folder = resources.files("engine.profiles.shipped")
    return {
        entry.name.rsplit(".", 1)[0]: entry
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(PROFILE_SUFFIXES)
    }


def _scan_user() -> tuple[dict[str, Path], str | None]:
    """The user's profile files by name, and why the folder could not be read (None when it could).

    An unreadable folder is skipped, not fatal: it must not take the shipped profiles down with it."""
    folder = user_profiles_dir()
    try:
        if not folder.is_dir():
            return {}, None
        return {p.stem: p for p in sorted(folder.iterdir()) if p.suffix in PROFILE_SUFFIXES and p.is_file()}, None
    except OSError as exc:
        return {}, f"cannot read your profiles folder {folder} ({exc.strerror or exc}); only shipped profiles are used"


def _user() -> dict[str, Path]:
    return _scan_user()[0]


def _read_user(path: Path) -> tuple[str | None, str | None]:
    """(text, None), or (None, why it was skipped) for a file that is not readable UTF-8 text."""
    try:
        return path.read_text(encoding="utf-8"), None
    except UnicodeDecodeError:
        return None, f"skipped {path}: not a text file (not UTF-8)"
    except OSError as exc:
        return None, f"skipped {path}: cannot read it ({exc.strerror or exc})"


def user_profile_warnings(read_files: bool = False) -> list[str]:
    """What was skipped among the user's profiles: the folder when it cannot be read, and with
    `read_files` each file in it that is not readable text (what `list_profiles` leaves out)."""
    found, problem = _scan_user()
    notes = [problem] if problem else []
    if read_files:
        notes += [why for why in (_read_user(path)[1] for path in found.values()) if why]
    return notes


def list_profiles() -> list[ProfileRef]:
    """Shipped profiles and the user's own (a user profile shadows a shipped one of the same name).

    User files that cannot be read as text are left out (`user_profile_warnings(read_files=True)`
    says which)."""
    found: dict[str, ProfileRef] = {}
    for name, entry in _shipped().items():
        found[name] = ProfileRef(name, str(entry), True, *_summary(entry.read_text(encoding="utf-8")))
    for name, path in _user().items():
        text = _read_user(path)[0]
        if text is not None:
            found[name] = ProfileRef(name, str(path), False, *_summary(text))
    return sorted(found.values(), key=lambda r: r.name)


def _summary(text: str) -> tuple[str, str]:
    try:
        data = yamlfile.load(text, "")
    except yamlfile.YamlInvalid:
        return "(unreadable YAML)", ""
    if not isinstance(data, dict):
        return "(not a mapping)", ""
    return str(data.get("description", "")), str(data.get("platform", ""))


def resolve_source(name_or_path: str) -> tuple[str, str]:
    """(display path, text) of a profile given by name or by path."""
    candidate = Path(os.path.expanduser(name_or_path))
    looks_like_path = os.sep in name_or_path or name_or_path.endswith(PROFILE_SUFFIXES)
    if looks_like_path or candidate.is_file():
        return str(candidate), _read(candidate)
    user = _user()
    if name_or_path in user:
        path = user[name_or_path]
        return str(path), _read(path)
    shipped = _shipped()
    if name_or_path in shipped:
        entry = shipped[name_or_path]
        return str(entry), entry.read_text(encoding="utf-8")
    names = sorted(set(shipped) | set(user))
    raise BadInput(
        _("no profile named {name}").format(name=repr(name_or_path)) + suggest(name_or_path, names),
        _("pick one of: {names} (`ascendctl profile list`), or give a path to a YAML file").format(
            names=", ".join(names)
        ),
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(
            _("profile file not found: {path}").format(path=path),
            _("check the path, or give a name from `ascendctl profile list`"),
        )
    except IsADirectoryError:
        raise BadInput(
            _("{path} is a directory, not a profile file").format(path=path), _("give the path of a YAML file")
        )
    except UnicodeDecodeError:
        raise BadInput(_("{path} is not a text file (not UTF-8)").format(path=path), _("give a YAML profile file"))
    except OSError as exc:
        raise BadInput(
            _("cannot read profile {path}: {error}").format(path=path, error=exc.strerror or exc),
            _("check the file's permissions"),
        )


def _parse(text: str, source: str) -> tuple[dict[str, Any], dict[str, int], list[Problem]]:
    """YAML -> {section: {key: value}} plus the line of every key; duplicates are problems.

    Text that is not a mapping at all raises ProfileInvalid with that one problem: every key
    would otherwise also be reported "is required", burying the line to fix."""
    try:
        data = yamlfile.load(text, source)
    except yamlfile.YamlInvalid as exc:
        raise ProfileInvalid(source, [exc.problem]) from None
    if data is None:
        raise ProfileInvalid(source, [Problem(source, 1, "", "the profile is empty")])
    if not isinstance(data, dict):
        raise ProfileInvalid(
            source, [Problem(source, yamlfile.line_of(data) or 1, "", "a profile must be a mapping of sections")]
        )
    problems = [
        Problem(p.file, p.line, p.key, p.message.replace("duplicate key", "duplicate section"))
        if p.key in SECTIONS
        else p
        for p in yamlfile.duplicate_keys(data, source)
    ]
    lines: dict[str, int] = {}
    raw: dict[str, Any] = {"": {}}
    for key, value in data.items():
        key, line = str(key), yamlfile.line_of(data, key) or 1
        lines[key] = line
        if key not in SECTIONS:
            raw[""][key] = value
        elif value is None:
            raw[key] = {}
        elif not isinstance(value, dict):
            problems.append(Problem(source, line, key, "must be a mapping of keys"))
        else:
            raw[key] = {str(k): v for k, v in value.items()}
            lines.update((f"{key}.{k}", yamlfile.line_of(value, k) or line) for k in value)
    return raw, lines, problems


def _apply_overrides(raw: dict[str, Any], model: str | None, sets: Sequence[str]) -> list[Problem]:
    problems: list[Problem] = []
    if model is not None:
        raw.setdefault("model", {})["path"] = model
    for item in sets:
        where = f"--set {mask_override(item)}"
        key, eq, text = item.partition("=")
        section, dot, name = key.strip().rpartition(".")
        if not eq or not name:
            problems.append(Problem(where, None, "", "expected SECTION.KEY=VALUE, e.g. engine.max_num_seqs=32"))
            continue
        if section not in SECTIONS and not (section == "" and name in SCHEMA[""]):
            problems.append(Problem(where, None, key, f"unknown section{suggest(section, list(SECTIONS))}"))
            continue
        if not text.strip():
            # An empty value used to drop the key silently, leaving the profile's value in force.
            problems.append(
                Problem(where, None, key.strip(), "has no value: give one, or `null` to fall back to the default")
            )
            continue
        try:
            value = yamlfile.load(text, where)
        except yamlfile.YamlInvalid:
            value = text
        raw.setdefault(section, {})
        if raw[section] is None:
            raw[section] = {}
        raw[section][name] = value
    return problems


def _expand(raw: dict[str, Any]) -> None:
    """${cache} -> the ascendctl cache dir (the demo builds its tiny model there); ~ -> home."""
    model = raw.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("path"), str):
        return
    path = model["path"]
    if CACHE_PLACEHOLDER in path:
        from engine.runs import cache_dir

        path = path.replace(CACHE_PLACEHOLDER, str(cache_dir()))
    model["path"] = os.path.expanduser(path)


def load_profile(name_or_path: str, overrides: Sequence[str] = (), model: str | None = None) -> Profile:
    """A validated profile by shipped/user name or by path, with `--set` overrides applied.

    `overrides` are `SECTION.KEY=VALUE` strings (values parsed as YAML scalars); `model` replaces
    model.path (the --model flag). Raises ProfileInvalid (a BadInput) listing every problem.
    """
    source, text = resolve_source(name_or_path)
    return load_profile_text(text, source, overrides, model, default_name=Path(source).name.rsplit(".", 1)[0])


def load_profile_text(
    text: str,
    source: str = "<profile>",
    overrides: Sequence[str] = (),
    model: str | None = None,
    default_name: str = "profile",
) -> Profile:
    raw, lines, problems = _parse(text, source)
    problems += _apply_overrides(raw, model, overrides)
    _expand(raw)
    override_keys = {item.partition("=")[0].strip(): item for item in overrides}
    if model is not None:
        override_keys["model.path"] = f"--model {model}"

    def locate(dotted: str) -> tuple[str, int | None]:
        if dotted in override_keys:
            item = override_keys[dotted]
            return (item if item.startswith("--model") else f"--set {mask_override(item)}"), None
        return source, lines.get(dotted, lines.get(dotted.split(".")[0], 1))

    profile, more = build(raw, locate, default_name)
    problems += more
    if problems or profile is None:
        raise ProfileInvalid(source, problems)
    return _with_origin(profile, source, tuple(overrides) + ((f"--model {model}",) if model else ()))


def _with_origin(profile: Profile, source: str, overrides: tuple[str, ...]) -> Profile:
    from dataclasses import replace

    return replace(profile, source=source, overrides=overrides)


def dump_profile(profile: Profile) -> str:
    """The resolved profile as YAML (placeholders expanded, overrides applied)."""
    overrides = profile.masked_overrides()
    header = f"# resolved from {profile.source}" + (f" with {' '.join(overrides)}" if overrides else "")
    return header + "\n" + yaml.safe_dump(profile.to_dict(), sort_keys=False, allow_unicode=True)
