"""`ascendctl profile list / show / validate`: the serving profiles and what they resolve to."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ascendctl.profile_args import (
    MODEL_HELP,
    PRECEDENCE,
    PROFILE_HELP,
    SET_HELP,
    compat_warnings,
    load,
    warn_skipped_user_profiles,
)
from ascendctl.style import clean, ljust_cells, plain, safe, spaced
from engine.i18n import C_, _


def _list() -> None:
    """List the shipped profiles and your own (user profiles shadow shipped ones)."""
    from ascendctl.output import get_output
    from engine.profiles import list_profiles, user_profiles_dir

    out = get_output()
    warn_skipped_user_profiles(read_files=True)
    refs = list_profiles()

    def render(console) -> None:
        from rich.table import Table

        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in (C_("profile list", "name"), _("platform"), _("description"), _("from")):
            table.add_column(col)
        for ref in refs:
            # Profiles are user files: a description holding `[/]` or an escape sequence is text.
            table.add_row(
                plain(ref.name),
                plain(ref.platform or "N/A"),
                plain(ref.description or "N/A"),
                plain(_("shipped") if ref.shipped else ref.path),
            )
        console.print(table)
        folder = str(user_profiles_dir())
        home = str(Path.home())
        if folder.startswith(home + "/"):
            folder = "~" + folder[len(home) :]
        mine = _("your own profiles: {path}").format(path=f"{safe(folder)}/NAME.yaml")
        console.print(f"\n[dim]{mine}[/]", soft_wrap=True)

    out.emit({"profiles": refs, "user_dir": str(user_profiles_dir())}, render)


def _show(
    profile: str = typer.Argument(..., help=PROFILE_HELP),
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    sets: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """Print a profile as resolved: defaults filled in, ${cache} expanded, overrides applied.

    Precedence, lowest first: built-in defaults < the profile file < --model < each --set in order.
    """
    from ascendctl.output import get_output
    from engine.profiles import dump_profile

    resolved = load(profile, sets, model)
    data = {"source": resolved.source, "overrides": resolved.masked_overrides(), "profile": resolved.to_dict()}
    get_output().emit(
        data,
        lambda console: console.print(
            clean(dump_profile(resolved).rstrip("\n"), multiline=True), markup=False, highlight=False, soft_wrap=True
        ),
    )


def _validate(
    profiles: List[str] = typer.Argument(..., help="Profile names or YAML files to check."),
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    sets: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """Check profiles against the schema; every problem is listed with file:line and key.

    Settings no engine of the profile's platform knows yet are listed as warnings. Exit code 0 when
    all are valid (warnings or not), 2 when any is not.
    """
    from ascendctl.output import get_output
    from engine.errors import BadInput
    from engine.profiles import ProfileInvalid, load_profile

    out = get_output()
    warn_skipped_user_profiles()
    results = []
    for name in profiles:
        try:
            resolved = load_profile(name, tuple(sets or ()), model=model)
            results.append(
                {
                    "profile": name,
                    "source": resolved.source,
                    "valid": True,
                    "problems": [],
                    "warnings": compat_warnings(resolved),
                    "error": None,
                }
            )
        except ProfileInvalid as exc:
            results.append(
                {
                    "profile": name,
                    "source": exc.source,
                    "valid": False,
                    "problems": exc.problems,
                    "warnings": [],
                    "error": None,
                }
            )
        except BadInput as exc:
            results.append(
                {"profile": name, "source": None, "valid": False, "problems": [], "warnings": [], "error": exc.cause}
            )

    valid, invalid = ljust_cells(_("valid"), 7), ljust_cells(_("invalid"), 7)  # one column for both

    def render(console) -> None:
        for r in results:
            if r["valid"]:
                console.print(
                    f"[green]{valid}[/] {safe(r['profile'])}  [dim]{safe(r['source'])}[/]",
                    soft_wrap=True,
                )
                for warning in r["warnings"]:
                    console.print(
                        "  " + spaced(_("warning:")) + clean(warning), markup=False, highlight=False, soft_wrap=True
                    )
                continue
            if r["error"]:
                console.print(
                    f"[red]{invalid}[/] {safe(r['profile'])}: {safe(r['error'])}",
                    highlight=False,
                    soft_wrap=True,
                )
                continue
            count = len(r["problems"])
            where = f"  [dim]{safe(r['source'])}[/]" if r["source"] != r["profile"] else ""
            console.print(
                f"[red]{invalid}[/] {safe(r['profile'])}{where}  "
                + (_("({count} problem)") if count == 1 else _("({count} problems)")).format(count=count),
                soft_wrap=True,
            )
            for p in r["problems"]:
                console.print(f"  {clean(p)}", markup=False, highlight=False, soft_wrap=True)

    out.emit({"results": results, "valid": all(r["valid"] for r in results)}, render)
    if not all(r["valid"] for r in results):
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Serving profiles: list them, show one resolved, validate files. " + PRECEDENCE,
        no_args_is_help=True,
    )
    group.command("list")(_list)
    group.command("show")(_show)
    group.command("validate")(_validate)
    app.add_typer(group, name="profile")
