"""The documentation cannot drift from the repository or the code without a test failing.

Every relative link in README.md and docs/ resolves (file and heading), the API reference
names exactly the fields the CRDs have, the configuration page names exactly the options
of ``run``, and every ``nodepool-operator`` command line shown is one the CLI accepts.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.core
import typer.main

from nodepool_operator import cli
from nodepool_operator.api import autoscaler as autoscaler_api
from nodepool_operator.api import nodepool_schema
from nodepool_operator.api import scalerequest as scalerequest_api

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def _without_code(text: str) -> str:
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", _without_code(page.read_text()), re.M)
    return {_slug(heading) for heading in headings}


def _relative_links(page: Path) -> Iterator[str]:
    for target in LINK.findall(_without_code(page.read_text())):
        if not re.match(r"[a-z]+:", target):
            yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in _relative_links(page):
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
            broken.append(f"{target}: no heading #{anchor}")
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"


def test_every_document_in_docs_is_on_the_map() -> None:
    listed = set(LINK.findall((DOCS / "README.md").read_text()))
    missing = [page.name for page in DOCS.glob("*.md") if page.name != "README.md"]
    assert sorted(name for name in missing if name not in listed) == []


def test_the_readme_stays_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


# --- the API reference against the CRDs -------------------------------------------------

#: Objects whose own fields the reference tables list; deeper objects are described in
#: the meaning column of their parent (a taint's key, a condition's reason).
_TABULATED_OBJECTS = {"spec", "status", "spec.template", "spec.scaleDown"}


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    paths: set[str] = set()
    for name, child in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        paths.add(path)
        if path in _TABULATED_OBJECTS:
            paths |= _schema_paths(child, f"{path}.")
    return paths


def _crd_paths(crd: dict[str, Any]) -> set[str]:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    paths = _schema_paths(schema)
    return {path for path in paths if "." in path or path in ("spec", "status")} - {
        "apiVersion",
        "kind",
        "metadata",
    }


def _section(text: str, kind: str) -> str:
    match = re.search(rf"^## {kind} .*?(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/api.md has no section for {kind}"
    return match.group(0)


def _documented_paths(section: str) -> set[str]:
    """Fields named in the first column of the section's tables, made absolute by the
    subheading they sit under (``### spec.template`` makes ``cpu`` ``spec.template.cpu``)."""
    prefix = ""
    in_field_table = False
    paths: set[str] = set()
    for line in _without_code(section).splitlines():
        heading = re.match(r"^### (\S+)", line)
        if heading:
            word = heading.group(1)
            prefix = f"{word}." if word.startswith(("spec", "status")) else ""
            continue
        if re.match(r"^\|\s*:?-", line):
            continue  # the row under a table's header
        cell = re.match(r"^\| ([^|]+) \|", line)
        if not cell:
            in_field_table = False
            continue
        first = cell.group(1).strip()
        if first in ("field", "condition") or first.startswith("---"):
            in_field_table = in_field_table or first == "field"
            continue
        if not in_field_table:
            continue
        for name in re.findall(r"`([\w.]+)`", first):
            absolute = name if name.startswith(("spec", "status")) else f"{prefix}{name}"
            paths.add(absolute)
    return paths


@pytest.mark.parametrize(
    ("kind", "crd"),
    [
        ("NodePool", nodepool_schema.crd()),
        ("ScaleRequest", scalerequest_api.crd()),
        ("Autoscaler", autoscaler_api.crd()),
    ],
    ids=["NodePool", "ScaleRequest", "Autoscaler"],
)
def test_the_api_reference_names_exactly_the_fields_of_the_crd(
    kind: str, crd: dict[str, Any]
) -> None:
    documented = _documented_paths(_section((DOCS / "api.md").read_text(), kind))
    in_schema = _crd_paths(crd)
    objects_described_by_their_fields = {"spec", "status", "spec.template", "spec.scaleDown"}
    assert sorted(in_schema - documented - objects_described_by_their_fields) == [], (
        "fields in the CRD that docs/api.md does not describe"
    )
    assert sorted(documented - in_schema) == [], "fields docs/api.md describes that the CRD lacks"


# --- the configuration page against the CLI ---------------------------------------------

_COMMAND = typer.main.get_command(cli.app)


#: typer ships its own copy of click; its exceptions share this base.
_CLICK_ERROR: type[Exception] = next(
    cls
    for cls in typer.BadParameter.__mro__
    if cls.__name__ == "ClickException" and issubclass(cls, Exception)
)


def _option_names(command: Any) -> set[str]:
    names: set[str] = set()
    for parameter in command.params:
        if isinstance(parameter, typer.core.TyperOption):
            names.update(name for name in parameter.opts if name.startswith("--"))
    return names


def test_the_configuration_page_lists_exactly_the_options_of_run() -> None:
    assert isinstance(_COMMAND, typer.core.TyperGroup)
    run = _COMMAND.commands["run"]
    page = (DOCS / "configuration.md").read_text()
    table = re.search(r"^\| flag \|.*?(?=^\s*$)", page, re.M | re.S)
    assert table, "docs/configuration.md has no flag table"
    documented: set[str] = set()
    for line in table.group(0).splitlines():
        cell = re.match(r"^\| ([^|]+) \|", line)
        if cell:
            documented.update(re.findall(r"`(--[\w-]+)", cell.group(1)))
    offered = _option_names(run) - {"--help"}
    # A boolean flag is documented by its positive name; its --no- twin goes with it.
    offered_positive = {name for name in offered if not name.startswith("--no-")}
    assert sorted(offered_positive - documented) == [], "options of run missing from the page"
    assert sorted(documented - offered) == [], "options on the page that run does not have"


# --- command lines shown in the docs -----------------------------------------------------


def _shell_lines(text: str) -> Iterator[str]:
    for language, body in FENCE.findall(text):
        if language not in ("bash", "sh", "shell", "console", ""):
            continue
        joined = body.replace("\\\n", " ")
        for line in joined.splitlines():
            yield line.strip().removeprefix("$ ")


def _operator_invocations(page: Path) -> Iterator[list[str]]:
    for line in _shell_lines(page.read_text()):
        command = line.split("#", 1)[0].strip()
        if not command:
            continue
        words = shlex.split(command)
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words.pop(0)  # environment assignments before the command
        if words and Path(words[0]).name == "nodepool-operator":
            arguments = []
            for argument in words[1:]:
                if argument in ("|", "&&", ";", ">", "2>&1", "&"):
                    break
                arguments.append(argument)
            yield arguments


def _parse(command: Any, arguments: list[str]) -> None:
    """Parse as the CLI would when the command runs, without running it."""
    if "--help" in arguments:
        return
    context = command.make_context("nodepool-operator", list(arguments))
    if isinstance(command, typer.core.TyperGroup):
        # click keeps the subcommand's name apart from its arguments
        pending = [*getattr(context, "_protected_args", []), *context.args]
        name, subcommand, rest = command.resolve_command(context, pending)
        assert subcommand is not None, f"no command {name}"
        _parse(subcommand, rest)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_command_line_shown_is_one_the_cli_accepts(page: Path) -> None:
    refused = []
    for arguments in _operator_invocations(page):
        try:
            _parse(_COMMAND, arguments)
        except _CLICK_ERROR as error:
            refused.append(f"nodepool-operator {' '.join(arguments)}: {error}")
        except Exception as error:  # e.g. a group shown without its command
            refused.append(f"nodepool-operator {' '.join(arguments)}: {type(error).__name__}")
    assert refused == [], f"{page.relative_to(ROOT)}: {refused}"


def test_the_command_check_sees_the_command_lines_the_docs_show() -> None:
    shown = [arguments for page in PAGES for arguments in _operator_invocations(page)]
    assert ["cluster", "up", "--dir", ".cluster"] in shown
