"""The README and docs/ as a newcomer follows them: every relative link opens a file that
exists, every `#anchor` names a heading of its target, and the README stays short enough
to read to the end (the rest lives in docs/, one link away)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The text a reader sees as prose, line for line: a link shown in a fenced block or a code span
    is an example, not a link (a code span as a link's text stays)."""
    text = FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    return CODE_SPAN.sub(lambda span: "" if "](" in span.group(0) else span.group(0), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lowercased, punctuation other
    than '-' and '_' dropped, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


@functools.cache
def anchors(page: Path) -> set[str]:
    """Every anchor GitHub gives the headings of `page`; a repeated heading gets -1, -2, ..."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(page: Path) -> list[tuple[int, str, str]]:
    """(line, text, target) of every link to a file beside `page`; http:, https:, mailto: are not files."""
    prose = _prose(page.read_text())
    return [(prose.count("\n", 0, link.start()) + 1, link[1], link[2]) for link in LINK.finditer(prose)
            if not re.match(r"[a-z][a-z0-9+.-]*:", link[2])]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_opens_a_file_and_a_heading(page: Path):
    broken = []
    for line, text, link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        shown = target.relative_to(ROOT) if target.is_relative_to(ROOT) else target
        if not target.exists():
            broken.append(f"line {line}: [{text}]({link}): {shown} does not exist")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"line {line}: [{text}]({link}): {shown} has no heading whose anchor is #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)} has broken links:\n  " + "\n  ".join(broken)


def test_the_readme_is_short_enough_to_read_to_the_end():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, over {README_MAX_LINES}: move the detail into docs/ and link to it")


@pytest.mark.parametrize("heading, anchor", [
    ("Decode kernels on the fourth machine, and the demo after them",
     "decode-kernels-on-the-fourth-machine-and-the-demo-after-them"),
    ("w_opd 0.25 with the gate on, against the default (5 seeds each)",
     "w_opd-025-with-the-gate-on-against-the-default-5-seeds-each"),
    ("The rollout driver: `openclaw-rl agent`", "the-rollout-driver-openclaw-rl-agent"),
    ("Agents: integrated (outcome + process) reward", "agents-integrated-outcome--process-reward"),
    ("§1 Vocabulary", "1-vocabulary"),
])
def test_slug_follows_github(heading: str, anchor: str):
    assert slug(heading) == anchor
