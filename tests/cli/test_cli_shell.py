"""The shell's conventions: one-line errors, exit codes, global flags anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ascendctl.cli import _split_global_flags, main
from ascendctl.errors import EXIT_PROBLEMS, EXIT_UNREACHABLE, EXIT_USAGE, exit_code_for
from ascendctl.output import Output, to_jsonable
from engine.errors import BadInput, ProblemsFound, Unreachable

ASCENDCTL = Path(sys.executable).with_name("ascendctl")


def test_unknown_command_is_a_usage_error_without_traceback(capsys):
    assert main(["no-such-command"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "No such command" in err and "--help" in err
    assert "Traceback" not in err


def test_global_flags_are_taken_from_any_position():
    rest, flags = _split_global_flags(["triage", "--json", "x.log", "--debug", "--", "--json"])
    assert rest == ["triage", "x.log", "--", "--json"]
    assert flags == {"--json", "--debug"}


@pytest.mark.parametrize(
    "exc, code",
    [(BadInput("x"), EXIT_USAGE), (Unreachable("x"), EXIT_UNREACHABLE), (ProblemsFound("x"), EXIT_PROBLEMS)],
)
def test_error_types_map_to_documented_exit_codes(exc, code):
    assert exit_code_for(exc) == code


def test_json_output_carries_schema_version_and_nulls(capsys):
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Row:
        name: str
        value: float | None

    Output(json_mode=True).emit({"rows": [Row("a", float("nan")), Row("b", None)]})
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    assert doc["rows"] == [{"name": "a", "value": None}, {"name": "b", "value": None}]
    assert to_jsonable(Path("/x")) == "/x"


def test_help_lists_every_command():
    out = subprocess.run([str(ASCENDCTL), "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("doctor", "plan", "serve", "profile", "top", "triage", "bench", "demo"):
        assert command in out, f"`ascendctl --help` does not list {command}"


def test_a_crash_has_its_own_exit_code_not_found_problems(capsys, monkeypatch):
    from ascendctl.errors import EXIT_SOFTWARE

    def boom(*_a, **_k):
        raise RuntimeError("a bug")

    monkeypatch.setattr("engine.doctor.run_doctor", boom)
    assert main(["doctor"]) == EXIT_SOFTWARE == 70
    assert "unexpected error: RuntimeError: a bug" in capsys.readouterr().err
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "| 70 |" in readme


def test_a_stray_eoferror_is_a_crash_not_ctrl_c(capsys, monkeypatch):
    # Click turns any EOFError in a command into Abort, which reads as "interrupted" (130)
    from ascendctl.errors import EXIT_SOFTWARE

    def boom(*_a, **_k):
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")

    monkeypatch.setattr("engine.doctor.run_doctor", boom)
    assert main(["doctor"]) == EXIT_SOFTWARE
    assert "unexpected error: EOFError: Compressed file ended" in capsys.readouterr().err


def test_off_a_terminal_long_lines_are_not_wrapped():
    import io

    out_buf, err_buf = io.StringIO(), io.StringIO()
    out = Output(stdout=out_buf, stderr=err_buf)
    path = "/var/lib/ascendctl/runs/" + "very-long-directory-name/" * 8 + "engine.log"
    out.info(f"  watch it: ascendctl top http://127.0.0.1:8000    log: {path}")
    out.emit({}, lambda console: console.print(f"log: {path}"))
    out.error(f"cannot open {path}", "check it")
    assert f"log: {path}\n" in out_buf.getvalue()
    assert f"log: {path}\n" in err_buf.getvalue() and f"error: cannot open {path}\n" in err_buf.getvalue()


def test_errors_quoting_untrusted_text_print_no_escape_sequences():
    import io

    err_buf = io.StringIO()
    Output(stdout=io.StringIO(), stderr=err_buf).error("bad value '\x1b]0;pwned\x07\x1b[2J[/]x'", "fix [red]it[/]")
    text = err_buf.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "[/]x" in text and "[red]it[/]" in text
