"""Text we did not write (profiles, logs, /metrics, recorded machines) reaches the terminal as
text: no escape sequence gets through, and `[red]` or `[/]` is never read as Rich markup."""

from __future__ import annotations

from pathlib import Path

from ascendctl.cli import main

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "[/] [red]red[/red] \x1b]0;pwned\x07\x1b[2Jcleared"


def _assert_clean(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text
    assert "MarkupError" not in text and "unexpected error" not in text


def test_profile_list_and_show_with_a_hostile_description(capsys, tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    text = (ROOT / "profiles" / "cpu-tiny.yaml").read_text()
    text = text.replace("name: cpu-tiny", "name: evil").replace(
        "description: Tiny random Qwen3 on the CPU engine (the demo; no NPU needed)",
        'description: "' + HOSTILE.replace("\x1b", "\\e").replace("\x07", "\\a") + '"',
    )
    (folder / "evil.yaml").write_text(text)
    assert main(["profile", "list"]) == 0
    out, err = capsys.readouterr()
    _assert_clean(out + err)
    assert "[/] [red]red[/red]" in out
    assert main(["profile", "show", "evil"]) == 0
    out, err = capsys.readouterr()
    _assert_clean(out + err)


def test_top_diagnostics_print_hostile_text_as_text():
    import io

    from rich.console import Console

    from ascendctl.tui import render
    from engine.telemetry.snapshot import Diagnostic, Snapshot

    hostile = Diagnostic("x", "error", "a:8000", HOSTILE, "cause", "fix " + HOSTILE, source="log")
    buf = io.StringIO()
    Console(file=buf, width=200).print(render.frame(Snapshot(time=0.0, seq=1, diagnostics=(hostile,))))
    _assert_clean(buf.getvalue())
    assert "[/] [red]red[/red]" in buf.getvalue()


def test_serve_diagnosis_prints_the_engine_log_as_text(tmp_path):
    import io

    from ascendctl.launch_view import show_diagnosis
    from ascendctl.output import Output
    from engine.launcher.diagnosis import diagnose
    from engine.launcher.supervisor import Outcome

    lines = [
        "INFO 11-29 21:12:20 [core.py:1] starting \x1b]0;pwned\x07",
        "ERROR 11-29 21:12:21 [core.py:2] RuntimeError: boom " + HOSTILE,
        "RuntimeError: NPU out of memory. Tried to allocate 2.00 MiB [/]\x1b[2J",
    ]
    err = io.StringIO()
    out = Output(stdout=io.StringIO(), stderr=err)
    outcome = Outcome(exit_code=1, run_dir=tmp_path, url="http://127.0.0.1:8000", diagnosis=diagnose(lines, 1))
    show_diagnosis(out, outcome)
    _assert_clean(err.getvalue())
    assert "NPU out of memory" in err.getvalue()
