"""docs/performance.md stays a reader's page: every bench has a section, and the history resolves.

Each script in ``bench/`` has a section of docs/performance.md whose shown command line runs
it and which names the commit measured; the rounds before it live in ``bench/results/``, and
every link there (from the page, and between the results files) reaches its file and heading.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "performance.md"
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
BENCH_SCRIPTS = sorted(path.name for path in BENCH.glob("*.py"))
RESULT_PAGES = sorted(RESULTS.glob("*.md"))

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
HEADING = re.compile(r"^(#{2,3}) (.+)$", re.M)
#: An abbreviated commit as the pages write it: 7 hex digits, at least one of them a letter
#: and one a digit, so that neither a word nor a number passes for one.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7}\b")
#: Only this long, so the page stays a page to read, not a diary.
MOST_LINES = 500


def _sections(text: str) -> dict[str, str]:
    """Each ``##`` or ``###`` heading of the page with the text up to the next one."""
    # Blanked, not removed, so that a heading's offset is its offset in the page.
    without_code = FENCE.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), text)
    starts = [(match.start(), match.group(2)) for match in HEADING.finditer(without_code)]
    ends = [start for start, _ in starts[1:]] + [len(text)]
    return {title: text[start:end] for (start, title), end in zip(starts, ends, strict=True)}


def _command_lines(section: str) -> Iterator[list[str]]:
    """The command lines of a section's fenced blocks, as words, environment dropped."""
    for _language, body in FENCE.findall(section):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("$ "):
                line = line.removeprefix("$ ")
            elif not line.startswith((".venv/", "PYTHONPATH=", "python")):
                continue  # output of the command above, not a command
            words = shlex.split(line.split(" #", 1)[0])
            while words and re.match(r"^[A-Z_]+=", words[0]):
                words.pop(0)
            if words:
                yield words


def _runs(words: list[str], script: str) -> bool:
    return (
        len(words) >= 2
        and Path(words[0]).name.startswith("python")
        and words[1] == f"bench/{script}"
    )


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {_slug(heading) for heading in headings}


def _broken_links(page: Path, only_into: Path | None = None) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if only_into is not None and only_into not in (destination, *destination.parents):
            continue
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
            broken.append(f"{target}: no heading #{anchor}")
    return broken


def test_the_benches_are_found() -> None:
    assert {"peers.py", "scale.py", "runtime_queue.py"} <= set(BENCH_SCRIPTS)


@pytest.mark.parametrize("script", BENCH_SCRIPTS)
def test_every_bench_has_a_section_with_its_command_and_commit(script: str) -> None:
    sections = _sections(PAGE.read_text())
    running = [
        title
        for title, body in sections.items()
        if any(_runs(words, script) for words in _command_lines(body))
    ]
    assert running, f"no section of docs/performance.md shows a command that runs bench/{script}"
    dated = [title for title in running if COMMIT.search(FENCE.sub("", sections[title]))]
    assert dated, f"the sections showing bench/{script} ({running}) name no commit measured"


def test_the_section_finder_reads_commands_not_their_output() -> None:
    section = (
        "## A bench\n\nAt 1a2b3c4:\n\n```\n$ PYTHONPATH=src .venv/bin/python bench/x.py --n 1\n"
        "| rows | of bench/y.py output |\n```\n"
    )
    assert list(_command_lines(section)) == [[".venv/bin/python", "bench/x.py", "--n", "1"]]
    assert _runs([".venv/bin/python", "bench/x.py"], "x.py")
    assert not _runs(["cat", "bench/x.py"], "x.py")
    assert COMMIT.search("At 1a2b3c4:")
    assert not COMMIT.search("at 2026, deadbee and 1234567 are not commits")


def test_every_link_from_the_page_into_bench_results_resolves() -> None:
    assert _broken_links(PAGE, only_into=RESULTS) == []


@pytest.mark.parametrize("page", RESULT_PAGES, ids=lambda page: page.name)
def test_every_link_of_the_results_pages_resolves(page: Path) -> None:
    assert _broken_links(page) == []


def test_every_history_page_is_linked_from_the_page() -> None:
    linked = {
        (PAGE.parent / target.partition("#")[0]).resolve()
        for target in LINK.findall(PAGE.read_text())
    }
    histories = sorted(RESULTS.glob("*-history.md"))
    assert histories, "bench/results/ holds the rounds moved out of the page"
    assert [page.name for page in histories if page.resolve() not in linked] == []


def test_the_page_stays_short() -> None:
    assert len(PAGE.read_text().splitlines()) <= MOST_LINES
