"""The repository stands alone: no tracked file points outside it, and every link in the docs lands on a file.

A clone of the project has no sibling directories, so a reference to material next to the checkout (the
development machine's shared folder) is a dead end for every reader; docs/theory/ holds what such references
used to point at.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Spellings of the development machine's shared folder (split so that this file does not match itself).
OUTSIDE_REFERENCES = ("../" + "shared", "/work/" + "shared")
#: A Markdown link or image target: [text](target) / ![alt](target), up to the first space or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)")
#: Targets that are not files of the repository.
EXTERNAL_PREFIXES = ("http://", "https://", "mailto:", "#")
#: A path under docs/ named in any tracked text (code comments and docstrings cite docs pages this way).
DOCS_PATH = re.compile(r"(?<![\w/.])docs/[\w./-]+\.(?:md|png)")


def tracked_files() -> list[Path]:
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listing.decode().split("\0") if name]


def tracked_texts() -> dict[Path, str]:
    texts = {}
    for path in tracked_files():
        try:
            texts[path] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue   # binary files (figures) and files deleted in the work tree hold no references
    return texts


def link_targets(markdown: str) -> list[str]:
    """Relative file targets of the Markdown links of a page, anchors stripped, code blocks skipped."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    targets = []
    for target in LINK.findall(prose):
        if target.startswith(EXTERNAL_PREFIXES):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_no_tracked_file_points_outside_the_repository():
    offenders = [f"{path.relative_to(ROOT)}: {spelling}" for path, text in tracked_texts().items()
                 for spelling in OUTSIDE_REFERENCES if spelling in text]
    assert not offenders, "references outside the repository:\n" + "\n".join(offenders)


def test_every_relative_link_in_the_docs_resolves_inside_the_repository():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert ROOT / "docs" / "theory" / "hybrid-algorithm.md" in pages
    broken = []
    checked = 0
    for page in pages:
        for target in link_targets(page.read_text(encoding="utf-8")):
            resolved = (page.parent / target).resolve()
            checked += 1
            lands = resolved.is_file() or (resolved / "README.md").is_file()   # a folder shows its README
            if not resolved.is_relative_to(ROOT) or not lands:
                broken.append(f"{page.relative_to(ROOT)}: ({target})")
    assert checked > 0
    assert not broken, "links that do not land on a file of the repository:\n" + "\n".join(broken)


def test_every_docs_path_named_in_a_tracked_file_exists():
    named = {match for text in tracked_texts().values() for match in DOCS_PATH.findall(text)}
    assert "docs/theory/raybot.md" in named   # the code's docstrings cite the theory pages this way
    missing = sorted(name for name in named if not (ROOT / name).is_file())
    assert not missing, f"docs paths named in tracked files but absent: {missing}"


def test_the_link_reader_sees_links_and_skips_external_ones_and_code():
    page = "[a](theory/x.md#notation) ![fig](y.png) [web](https://example.org) [here](#top)\n```\n[no](z.md)\n```"
    assert link_targets(page) == ["theory/x.md", "y.png"]
