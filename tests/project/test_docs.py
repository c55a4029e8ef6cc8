"""The README is the front door and docs/*.md the reference (issue 18 item 6): the README stays short and
starts with the two commands that set everything up, every docs page is reachable from it, and no relative
link in either points at a file or heading that is not there (moving text between pages is how links rot).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 260

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text with fenced blocks and code spans removed: what is in them is code, never a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _anchors(md: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but '-' and '_' dropped, spaces to '-', repeats -1, -2."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, title in HEADING.findall(FENCE.sub("", md.read_text(encoding="utf-8"))):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _relative_links(md: Path) -> list[str]:
    return [
        t for t in LINK.findall(_prose(md.read_text(encoding="utf-8"))) if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)
    ]


def test_readme_is_a_front_door_not_the_reference() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move reference text to docs/"


def test_readme_starts_with_the_two_commands_that_set_everything_up() -> None:
    lines = [ln for ln in README.read_text(encoding="utf-8").splitlines() if ln.strip()]
    assert lines[0].startswith("# "), "the README starts with its title"
    assert lines[1].startswith("```"), "right under the title: the two commands, in a code block"
    block = lines[2 : lines.index("```", 2)]
    assert [ln.split("#")[0].strip() for ln in block] == ["make run", "make test"]


def test_every_docs_page_is_linked_from_the_readme() -> None:
    assert PAGES, "docs/*.md: the reference pages"
    linked = {(README.parent / unquote(t.split("#")[0])).resolve() for t in _relative_links(README)}
    assert [p.name for p in PAGES if p.resolve() not in linked] == []


@pytest.mark.parametrize("md", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file_and_heading(md: Path) -> None:
    broken = []
    for target in _relative_links(md):
        path, _, anchor = unquote(target).partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert broken == []


def test_the_documented_shell_gate_is_the_shipped_one() -> None:
    # The docs once showed a gate that ran `ls -d runs/*/ | tail -n 1` after gate.sh had stopped doing so
    # (issue 19 item 7): every line of the snippet must be a line of docs/ci/gate.sh.
    page = (ROOT / "docs" / "reports.md").read_text(encoding="utf-8")
    m = re.search(r"\[docs/ci/gate\.sh\]\(ci/gate\.sh\).*?```bash\n(.*?)```", page, re.S)
    assert m, "docs/reports.md no longer shows the shell gate"
    shipped = {ln.strip() for ln in (ROOT / "docs" / "ci" / "gate.sh").read_text(encoding="utf-8").splitlines()}
    assert [ln for ln in m.group(1).splitlines() if ln.strip() and ln.strip() not in shipped] == []


def test_the_ascend_illustration_is_the_golden_rendering() -> None:
    # docs/ascend.md shows `compare --markdown` of the seed's bug: tests/golden/seed-bug.md (which
    # `MTPBENCH_UPDATE_GOLDEN=1 pytest tests/unit/render/test_golden.py` rewrites) under a heading that names no run. A
    # copy pasted by hand had gone stale: the MDEs and the tolerance of an older rule.
    page = (ROOT / "docs" / "ascend.md").read_text(encoding="utf-8").splitlines()
    golden = (ROOT / "tests" / "golden" / "seed-bug.md").read_text(encoding="utf-8").rstrip("\n").splitlines()
    start = next(i for i, ln in enumerate(page) if ln.startswith("**mtpbench: run `<illustration>`**"))
    end = page.index("## When the fix was not applied")
    assert page[start + 1 : end] == [*golden[1:], ""]
