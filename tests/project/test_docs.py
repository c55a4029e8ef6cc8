"""The README is the front door and docs/*.md the reference (issue 18 item 6): the README stays short and
starts with the two commands that set everything up, every docs page is reachable from it, and no relative
link in either points at a file or heading that is not there (moving text between pages is how links rot).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
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
    # Issue 36 item 7: a headed quick start, first; under the title a short paragraph at most (what it is).
    lines = [ln for ln in README.read_text(encoding="utf-8").splitlines() if ln.strip()]
    assert lines[0].startswith("# "), "the README starts with its title"
    start = lines.index("## Quick start")
    assert start <= 3 and not any(ln.startswith("#") for ln in lines[1:start]), "the quick start is the first section"
    assert lines[start + 1].startswith("```"), "right under its heading: the two commands, in a code block"
    block = lines[start + 2 : lines.index("```", start + 2)]
    assert [ln.split("#")[0].strip() for ln in block] == ["make run", "make test"]


def test_every_readme_line_fits_120_characters() -> None:
    long = [(n, len(ln)) for n, ln in enumerate(README.read_text(encoding="utf-8").splitlines(), 1) if len(ln) > 120]
    assert long == [], f"README.md lines (number, length) over 120 characters: {long}"


def test_the_readme_states_the_exit_codes_as_a_table_of_their_own() -> None:
    # The gate's contract, not a column of the commands table: a row per code, 0 to 5, and the signals'.
    text = README.read_text(encoding="utf-8")
    section = text.split("## The gate's contract: exit codes", 1)[1].split("\n## ", 1)[0]
    codes = [row.split("|")[1].strip() for row in section.splitlines() if re.match(r"^\| *\d", row)]
    assert codes == ["0", "1", "2", "3", "4", "5", "130 / 143 / 129"]
    from mtpbench.errors import ExitCode

    assert sorted(int(c) for c in codes[:6]) == sorted(int(code) for code in ExitCode)


def test_the_readme_draws_the_layout_in_five_lines() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```\n(.*?)^```", section, re.M | re.S)
    lines = block.splitlines()
    assert len(lines) == 5
    for line in lines:  # each names a top-level folder that is there
        assert (ROOT / line.split()[0]).is_dir(), line


# A path to a Markdown page in a module's text ("docs/verdicts.md", "README.md", "DESIGN.md"): relative to the
# repository's root.
MD_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")


def test_every_page_a_module_points_to_exists() -> None:
    # Three modules pointed to a DESIGN.md that never existed (issue 36 item 7).
    missing = []
    for py in sorted((ROOT / "mtpbench").rglob("*.py")):
        for target in MD_PATH.findall(py.read_text(encoding="utf-8")):
            if not (ROOT / target).is_file():
                missing.append(f"{py.relative_to(ROOT)}: {target}")
    assert missing == []


def test_generated_reports_live_in_one_folder_named_after_their_script() -> None:
    # benchmarks/ holds the scripts; what they write is benchmarks/reports/<script>.md (and .json), one style.
    bench = ROOT / "benchmarks"
    loose = [p.name for p in bench.iterdir() if p.is_file() and p.suffix != ".py"]
    assert loose == [], f"reports outside benchmarks/reports/: {loose}"
    scripts = {p.stem for p in bench.glob("*.py")}
    reports = sorted((bench / "reports").iterdir())
    assert reports and [p.name for p in reports if p.stem not in scripts] == []


def test_make_lint_covers_the_docs_scripts(tmp_path: Path) -> None:
    # docs/*_repro.py are Python a reader runs: linted like the rest.
    assert list((ROOT / "docs").glob("*.py")), "no script in docs/: drop this test"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    dry = subprocess.run(
        ["make", "-n", "-C", str(ROOT), f"VENV={tmp_path / 'v'}", "lint"], capture_output=True, text=True, env=env
    ).stdout
    ruff = [shlex.split(x) for x in dry.splitlines() if "/bin/ruff " in x]
    assert len(ruff) == 2 and all("docs" in x for x in ruff), dry


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
