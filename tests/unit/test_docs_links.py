"""Every relative link and image in the project's Markdown points at a file or folder that exists,
and every ``#anchor`` at a heading of the file it names, by GitHub's rule for heading ids. The
README is the door to docs/: moving a section out of one file must not leave a link dead. And the
README stays a front page: short, its first code block the commands users are promised."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The front page and the folders whose Markdown is the project's documentation.
FRONT_PAGE = "README.md"
DOCUMENTED_FOLDERS = ("docs", "stacks", "functions", "bench", "events", "container")
NEVER_CHECKED = ("node_modules", ".venv")  # other projects' Markdown, vendored or installed
FRONT_PAGE_MOST_LINES = 150
PROMISED_COMMANDS = ("python3 -m pip install uv", "uv run voicewire demo", "uv run pytest")

# An opening or closing code fence: three or more backticks or tildes, indented or not (a fence
# inside a list item is indented with the item).
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
# An inline code span, which may wrap onto the next line but never crosses a blank line.
CODE_SPAN = re.compile(r"(`+)(?:(?!\n[ \t]*\n).)+?(?<!`)\1(?!`)", re.DOTALL)
# [text](target) or ![alt](target), with an optional "title"; the text may hold one level of
# brackets ([*Measured*], [`x`]).
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?(?P<target>[^\s)>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
)
# A reference definition, [label]: target.
LINK_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(?P<target>[^\s>]+)>?", re.MULTILINE)
# ATX headings only: the project writes no setext (underlined) ones.
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(?P<text>.*?)(?:[ \t]+#+)?[ \t]*$")
URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # http:, https:, mailto:, ws:, ...
LINK_IN_HEADING = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


@dataclass(frozen=True)
class Link:
    """One link as written, and the line of the file it is on (for the failure message)."""

    target: str
    line: int


def without_fences(markdown: str) -> str:
    """The text with fenced code blocks blanked out, newlines kept so that line numbers still
    match: a `# comment` in a shell block is no heading, a link in one is an example."""
    kept: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines():
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
            kept.append("")
        elif fence is not None:
            if closes(line, fence):
                fence = None
            kept.append("")
        else:
            kept.append(line)
    return "\n".join(kept)


def without_code(markdown: str) -> str:
    """The text without fenced blocks nor inline code spans, line numbers kept: a link shown as
    code is an example, not a link."""
    return CODE_SPAN.sub(lambda span: "\n" * span.group(0).count("\n"), without_fences(markdown))


def closes(line: str, fence: str) -> bool:
    """Whether the line closes the fence that opened with ``fence``: the same character, at least
    as many, and nothing after them (a longer fence may show a shorter one inside it)."""
    closing = FENCE.match(line)
    return bool(
        closing
        and closing.group(1)[0] == fence[0]
        and len(closing.group(1)) >= len(fence)
        and not line.strip().lstrip(fence[0])
    )


def links_in(markdown: str) -> list[Link]:
    """Every inline link, image and reference definition outside code, in the order written."""
    text = without_code(markdown)
    found = [
        (match.start(), match.group("target"))
        for pattern in (INLINE_LINK, LINK_DEFINITION)
        for match in pattern.finditer(text)
    ]
    return [Link(target, text.count("\n", 0, start) + 1) for start, target in sorted(found)]


def github_slug(heading: str) -> str:
    """The id GitHub gives a heading (github-slugger): lowercase; every character that is not a
    letter, mark, digit, connector (``_``), hyphen or space removed; each space a hyphen. Links
    in a heading count by their text alone, as they render."""
    text = LINK_IN_HEADING.sub(r"\1", heading).strip().lower()
    return "".join(char for char in text if kept_in_slug(char)).replace(" ", "-")


def kept_in_slug(char: str) -> bool:
    category = unicodedata.category(char)
    return char in " -" or category[0] in "LMN" or category == "Pc"


def heading_ids(markdown: str) -> set[str]:
    """The ids of a file's headings; a repeated one gets -1, -2, ... as on GitHub."""
    ids: set[str] = set()
    # Inline code stays: a heading's `code` is part of its text and of its id.
    for line in without_fences(markdown).splitlines():
        heading = HEADING.match(line)
        if not heading:
            continue
        base = github_slug(heading.group("text"))
        slug, repeat = base, 0
        while slug in ids:
            repeat += 1
            slug = f"{base}-{repeat}"
        ids.add(slug)
    return ids


def broken_links(markdown_file: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with each of the file's relative links, one line each (none when all hold)."""
    problems: list[str] = []
    for link in links_in(markdown_file.read_text(encoding="utf-8")):
        if URL_SCHEME.match(link.target):
            continue  # off-site: not this test's business (and no network here)
        path_part, _, anchor = link.target.partition("#")
        path_part = path_part.partition("?")[0]
        if not path_part:
            target = markdown_file
        elif path_part.startswith("/"):  # GitHub resolves a rooted link from the repository root
            target = root / path_part.lstrip("/")
        else:
            target = markdown_file.parent / path_part
        where = f"line {link.line}: ({link.target})"
        if not target.exists():
            problems.append(f"{where}: no such file or folder {target.resolve()}")
        elif (
            anchor
            and is_markdown(target)
            and anchor not in heading_ids(target.read_text(encoding="utf-8"))
        ):
            problems.append(f"{where}: no heading #{anchor} in {target.name}")
    return problems


def is_markdown(target: Path) -> bool:
    """Only a Markdown file's anchors are headings (a folder's or a source file's, #L12, are not
    this test's to judge)."""
    return target.is_file() and target.suffix.lower() == ".md"


def documentation_files(root: Path = ROOT) -> list[str]:
    """README.md and the Markdown of the documented folders, as git sees the checkout (tracked
    files and new ones not ignored, so a doc is checked before its first commit)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):  # no git, or a tree without .git
        listed = [path.relative_to(root).as_posix() for path in root.rglob("*.md")]
    chosen = {
        path
        for path in listed
        if (path == FRONT_PAGE or path.split("/")[0] in DOCUMENTED_FOLDERS)
        and not set(path.split("/")) & set(NEVER_CHECKED)
        and (root / path).is_file()  # listed by git, yet deleted in the working tree
    }
    return sorted(chosen)


DOCUMENTATION = documentation_files()


@pytest.mark.parametrize("markdown", DOCUMENTATION)
def test_every_relative_link_and_anchor_resolves(markdown: str) -> None:
    problems = broken_links(ROOT / markdown)
    assert not problems, f"{markdown}:\n" + "\n".join(problems)


def test_the_front_page_and_the_guides_are_among_the_checked() -> None:
    # A discovery that found nothing would pass every parametrized test above.
    expected = {FRONT_PAGE, "docs/local-stack.md", "docs/deploy.md", "docs/results.md"}
    assert expected <= set(DOCUMENTATION)


def test_the_checker_finds_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "here.png").write_bytes(b"")
    (tmp_path / "other.md").write_text(
        "# Other\n\n## Faults: what the client receives\n\n## Twice\n\n## Twice\n\n"
        "## `voicewire up`\n\n```bash\n# not a heading\n```\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "## The seed's pipeline\n\n"
        "[fine](other.md#faults-what-the-client-receives) [second twice](other.md#twice-1)\n"
        "[code heading](other.md#voicewire-up) [shell comment](other.md#not-a-heading)\n"
        "[same file](#the-seeds-pipeline) ![picture](images/here.png) [folder](images/)\n"
        "[off-site](https://example.com/nowhere.md) [mail](mailto:someone@example.com)\n"
        "`[shown as code](not-there.md)` and ``[also code](not-there.md)``\n\n"
        "```markdown\n[in a fence](not-there.md)\n```\n\n"
        "[gone](missing.md) ![gone picture](images/missing.png)\n"
        "[bad anchor](other.md#nowhere) [bad same-file anchor](#not-a-heading)\n"
        "[third twice](other.md#twice-2)\n"
    )
    problems = broken_links(page, root=tmp_path)
    broken = [problem.split(": (")[1].split(")")[0] for problem in problems]
    assert broken == [
        "other.md#not-a-heading",
        "missing.md",
        "images/missing.png",
        "other.md#nowhere",
        "#not-a-heading",
        "other.md#twice-2",
    ]
    assert problems[1].startswith("line 15: ")  # the fence and code spans keep their lines


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("What is proven offline, and what is not", "what-is-proven-offline-and-what-is-not"),
        ("Faults: what the client receives", "faults-what-the-client-receives"),
        ("`voicewire up`", "voicewire-up"),
        ("First audio against the seed's pipeline", "first-audio-against-the-seeds-pipeline"),
        ("The CPU engine's graph rewrite", "the-cpu-engines-graph-rewrite"),
        ("snake_case and kebab-case", "snake_case-and-kebab-case"),
        ("Größe & Übergang", "größe--übergang"),
        ("See [the docs](docs/x.md)", "see-the-docs"),
    ],
)
def test_heading_ids_follow_github(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_readme_stays_a_front_page() -> None:
    readme = (ROOT / FRONT_PAGE).read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= FRONT_PAGE_MOST_LINES, (
        f"README.md has {len(lines)} lines: it points to docs/, it does not hold them"
    )
    # The first code block is the contract with users: install, the demo, the tests.
    first_block = re.search(r"^```[^\n]*\n(.*?)^```", readme, re.DOTALL | re.MULTILINE)
    assert first_block, "README.md has no code block"
    for command in PROMISED_COMMANDS:
        assert command in first_block.group(1), f"README's first code block lacks {command!r}"
