"""The README and the documentation show only commands the CLI accepts, and link only to pages that exist.

Every `agn-conformance ...` line of a fenced code block in README.md and docs/**/*.md is parsed with the
real parser: `harness.cli.parse_args` (which splits off what follows `--` itself), and for `agn-conformance
self-check ...` the self-check's own parser (`selfcheck.command.build_parser`), since the CLI hands those
arguments to `python -m selfcheck` before its own parser sees them. A line continued with `\\` is joined, a
leading `$ ` prompt, `VAR=value` assignments and `cd DIR &&`-style commands before it are dropped, comments
are ignored. An options file a documented command names is written from the documentation's own complete
example, so `--options FILE` parses as it would for a reader who copied it. Nothing is run.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from harness.cli import parse_args
from harness.timeouts import parse_overrides
from selfcheck.command import build_parser as self_check_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"
PAGES = (README, *sorted(DOCS.rglob("*.md")))
PROG = "agn-conformance"
SELF_CHECK = "self-check"
#: Where the documentation keeps its complete options file (tests/test_cli.py checks it is complete).
OPTIONS_PAGE = DOCS / "running.md"
OPTIONS_MARKER = "# options.yaml: a complete example"

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: What may stand before a command in a CI file's YAML: a list item and a key (`- run: `, `script: `).
_YAML_PREFIX = re.compile(r"^(?:-\s+)?(?:[\w.-]+:\s+)?")
_SEPARATORS = frozenset({"&&", "||", ";", "|"})
#: Words that run the command after them (with no options of their own in the docs).
_WRAPPERS = frozenset({"sudo", "env", "exec", "time", "command"})
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@dataclass(frozen=True)
class DocCommand:
    """One documented `agn-conformance` command: where it is written and its arguments after the program."""

    path: Path
    line: int
    text: str
    argv: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def case_id(self) -> str:
        shown = " ".join((PROG, *self.argv))
        return f"{self.where} {shown if len(shown) <= 70 else shown[:67] + '...'}"


def _fenced_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, language, logical line) of every fenced code block line, continuations joined."""
    fence: str | None = None
    language = ""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        opening = _FENCE.match(raw)
        if fence is None:
            if opening:
                fence, language = opening.group(1), opening.group(2).lower()
            continue
        if raw.strip().startswith(fence) and not raw.strip()[len(fence):].strip():
            if pending:
                yield start, language, " ".join(pending)
            fence, pending = None, []
            continue
        if not pending:
            start = number
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped.strip())
        yield start, language, " ".join(pending)
        pending = []


def _segments(tokens: list[str]) -> Iterator[list[str]]:
    """The simple commands of a shell line split at `&&`, `||`, `;` and `|`."""
    current: list[str] = []
    for token in tokens:
        if token in _SEPARATORS:
            yield current
            current = []
        elif token.endswith(";") and len(token) > 1:
            current.append(token[:-1])
            yield current
            current = []
        else:
            current.append(token)
    yield current


def _commands_of(path: Path, line: int, language: str, text: str) -> Iterator[DocCommand]:
    body = text.strip()
    body = body.removeprefix("$ ")
    if language in ("yaml", "yml"):
        body = _YAML_PREFIX.sub("", body, count=1)
    if PROG not in body or body.startswith("#"):
        return
    try:
        tokens = shlex.split(body, comments=True)
    except ValueError as exc:
        pytest.fail(f"{path.relative_to(ROOT)}:{line}: cannot split `{text}` as a shell line: {exc}")
    for segment in _segments(tokens):
        words = list(segment)
        while words and (_ENV_ASSIGNMENT.match(words[0]) or words[0] in _WRAPPERS):
            words.pop(0)
        if words and Path(words[0]).name == PROG:
            yield DocCommand(path, line, text, tuple(words[1:]))


def documented_commands() -> list[DocCommand]:
    return [command for page in PAGES for line, language, text in _fenced_lines(page)
            for command in _commands_of(page, line, language, text)]


COMMANDS = documented_commands()


def _options_example() -> str:
    text = OPTIONS_PAGE.read_text(encoding="utf-8")
    start = text.index(OPTIONS_MARKER)
    return text[start:text.index("```", start)]


def _write_options_files(argv: tuple[str, ...], where: Path) -> None:
    """Write the documentation's complete options example wherever a documented `--options` points."""
    for index, arg in enumerate(argv):
        name = None
        if arg == "--options" and index + 1 < len(argv):
            name = argv[index + 1]
        elif arg.startswith("--options="):
            name = arg.split("=", 1)[1]
        if name and not Path(name).is_absolute():
            target = where / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_options_example(), encoding="utf-8")


def test_the_docs_show_commands_to_check() -> None:
    """The extraction itself works: the quickstart's run and the documented subcommands are all found."""
    readme = [c for c in COMMANDS if c.path == README]
    assert any(c.argv == ("run",) for c in readme), "the README's quickstart `agn-conformance run` was not found"
    found = {c.argv[0] for c in COMMANDS if c.argv}
    assert {"run", "list", "demo", "self-check", "coverage", "compare"} <= found, sorted(found)
    assert len(COMMANDS) >= 40, len(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.case_id for c in COMMANDS])
def test_documented_command_parses(command: DocCommand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    _write_options_files(command.argv, tmp_path)
    argv = list(command.argv)
    try:
        if argv[:1] == [SELF_CHECK]:
            self_check_parser().parse_args(argv[1:])
        else:
            args = parse_args(argv)
            for entry in getattr(args, "timeout", None) or ():
                if entry != "NAME=SECONDS":
                    parse_overrides([entry])
    except SystemExit as exc:
        if exc.code == 0 and {"-h", "--help", "--version"} & set(argv):
            return
        error = capsys.readouterr().err.strip().splitlines()
        pytest.fail(f"{command.where}: `{command.text}` is refused by the CLI (exit {exc.code}): "
                    f"{error[-1] if error else 'no message'}")
    except ValueError as exc:
        pytest.fail(f"{command.where}: `{command.text}`: {exc}")


# ------------------------------------------------------------------------------------------ links


def _slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading; GitHub's agrees for these headings."""
    text = unicodedata.normalize("NFKD", heading.replace("`", "")).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    fence: str | None = None
    for raw in page.read_text(encoding="utf-8").splitlines():
        opening = _FENCE.match(raw)
        if opening and (fence is None or raw.strip().startswith(fence)):
            fence = opening.group(1) if fence is None else None
            continue
        if fence is None and (heading := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", raw)):
            anchors.add(_slug(heading.group(1)))
    return anchors


def _relative_links(page: Path) -> Iterator[tuple[int, str]]:
    fence: str | None = None
    for number, raw in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        opening = _FENCE.match(raw)
        if opening and (fence is None or raw.strip().startswith(fence)):
            fence = opening.group(1) if fence is None else None
            continue
        if fence is not None:
            continue
        for target in _LINK.findall(re.sub(r"`[^`]*`", "", raw)):
            if "://" in target or target.startswith(("mailto:", "#")):
                continue
            yield number, target


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link of the README and the docs names a file that exists, and an anchor it has."""
    broken = []
    for number, target in _relative_links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{page.relative_to(ROOT)}:{number}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{page.relative_to(ROOT)}:{number}: {target} (no heading gives #{anchor})")
    assert not broken, "\n".join(broken)


def test_the_readme_links_to_the_docs_pages() -> None:
    """The README is the front page: it links to the docs, and each page it links to is in the site's nav."""
    linked = {(README.parent / target.partition("#")[0]).resolve()
              for _, target in _relative_links(README) if target.startswith("docs/")}
    assert linked, "the README links to no docs page"
    nav = _nav_pages()
    for page in linked:
        assert page.exists(), page
        assert page.relative_to(DOCS).as_posix() in nav, f"{page} is linked from the README but not in the nav"


def _nav_pages() -> set[str]:
    config = yaml.safe_load(MKDOCS.read_text(encoding="utf-8"))

    def walk(node: object) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    assert config["docs_dir"] == "docs"
    return set(walk(config["nav"]))


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    nav = _nav_pages()
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - nav == set(), f"pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    assert nav - pages == set(), f"nav entries without a page: {sorted(nav - pages)}"
