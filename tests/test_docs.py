"""The documentation stays true to the code: every `arabert-pipeline VERB --flag` in a ```bash block of README.md and
docs/**/*.md names a verb and flags the CLI has, every relative link (and its #anchor) resolves, and the README keeps
the test command that .ci/run runs, in a front page of at most 120 lines of at most 120 characters."""
from __future__ import annotations

import argparse
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest

from arabert_pipeline.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
GLOBAL_OPTIONS = {"--debug", "--version"}  # options of `arabert-pipeline` itself, before the verb
FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SHELL_OPERATOR = re.compile(r"^[();<>|&]+$")


@lru_cache(maxsize=1)
def cli_options() -> dict[str, set[str]]:
    """Verb -> every option string its subparser accepts (e.g. {'answer': {'--demo', '-h', ...}})."""
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {verb: {opt for action in sub._actions for opt in action.option_strings}
            for verb, sub in verbs.choices.items()}


def bash_commands(markdown: str) -> list[str]:
    """The logical lines of the ```bash blocks: backslash continuations joined."""
    lines = []
    for match in FENCE.finditer(markdown):
        if match.group(1) not in {"bash", "sh", "shell", "console"}:
            continue
        joined = re.sub(r"\\\n", " ", match.group(2))
        lines.extend(line for line in joined.splitlines() if line.strip())
    return lines


def check_command_line(line: str, options: dict[str, set[str]]) -> list[str]:
    """The problems with each `arabert-pipeline VERB ...` (or `-m arabert_pipeline.cli VERB ...`) in a shell line."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)  # comments (`# ...`) are dropped by shlex
    except ValueError as err:
        return [f"cannot parse {line!r}: {err}"]
    problems = []
    for i, token in enumerate(tokens):
        if token == "arabert-pipeline":
            start = i + 1
        elif token == "-m" and i + 1 < len(tokens) and tokens[i + 1] == "arabert_pipeline.cli":
            start = i + 2
        else:
            continue
        while start < len(tokens) and tokens[start] in GLOBAL_OPTIONS:
            start += 1
        if start >= len(tokens) or SHELL_OPERATOR.match(tokens[start]):
            problems.append(f"no verb after arabert-pipeline in {line!r}")
            continue
        verb = tokens[start]
        if verb not in options:
            problems.append(f"unknown verb {verb!r} in {line!r}")
            continue
        for arg in tokens[start + 1:]:
            if SHELL_OPERATOR.match(arg):
                break
            if re.match(r"^--[A-Za-z]", arg) or re.match(r"^-[A-Za-z]$", arg):
                flag = arg.split("=", 1)[0]
                if flag not in options[verb]:
                    problems.append(f"`{verb}` has no option {flag} (in {line!r})")
    return problems


def github_anchors(markdown: str) -> set[str]:
    """The anchors a code host gives the headings of a Markdown file (GitHub's rule: lowercase, punctuation dropped,
    spaces to hyphens, -1, -2 ... for repeats)."""
    markdown = FENCE.sub("", markdown)
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", markdown, re.MULTILINE):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in anchors:
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def check_links(path: Path) -> list[str]:
    """The relative links and images of a Markdown file whose file (or #anchor in a Markdown file) does not exist."""
    text = path.read_text(encoding="utf-8")
    prose = re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))  # links inside code are not links
    problems = []
    for target in LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            problems.append(f"{path.relative_to(REPO)}: link to {target} (no {file_part})")
        elif (anchor and resolved.suffix == ".md" and resolved.is_file()
              and anchor not in github_anchors(resolved.read_text(encoding="utf-8"))):
            problems.append(f"{path.relative_to(REPO)}: link to {target} (no heading #{anchor})")
    return problems


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_the_docs_exist():
    assert len(DOCS) > 1 and (REPO / "docs").is_dir()


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_cli_line_names_a_real_verb_and_flags(doc):
    options = cli_options()
    problems = [p for line in bash_commands(doc.read_text(encoding="utf-8"))
                for p in check_command_line(line, options)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_relative_link_resolves(doc):
    problems = check_links(doc)
    assert not problems, "\n".join(problems)


def test_the_docs_show_every_verb():
    """Each verb has at least one example command somewhere in the docs."""
    used = set()
    for doc in DOCS:
        for line in bash_commands(doc.read_text(encoding="utf-8")):
            used.update(re.findall(r"(?:arabert-pipeline|arabert_pipeline\.cli)\s+(?:--debug\s+)?([a-z-]+)", line))
    assert set(cli_options()) - used == set()


def test_readme_keeps_the_ci_test_command():
    """.ci/run runs exactly the README's test command (its one line that runs pytest; other checks may follow it);
    the README must still show it in a bash block."""
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    ci_commands = [line for line in ci_lines if re.search(r"\bpytest\b", line) and not line.lstrip().startswith("#")]
    assert len(ci_commands) == 1, ci_commands
    assert ci_commands[0] in bash_commands((REPO / "README.md").read_text(encoding="utf-8"))


README_MAX_LINES = README_MAX_WIDTH = 120  # issue 53: the README is a front page; the detail lives in docs/


def front_page_problems(markdown: str) -> list[str]:
    """What makes a README too long to be a front page: more than README_MAX_LINES lines, or a line wider than
    README_MAX_WIDTH characters (code points, as an editor counts them)."""
    lines = markdown.splitlines()
    problems = [f"{len(lines)} lines (at most {README_MAX_LINES})"] if len(lines) > README_MAX_LINES else []
    problems += [f"line {n}: {len(line)} characters (at most {README_MAX_WIDTH})"
                 for n, line in enumerate(lines, 1) if len(line) > README_MAX_WIDTH]
    return problems


def test_the_readme_is_a_front_page():
    """Issue 53: what it is, the two commands, the API, the verbs, one results table, licences, links, and no more."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    problems = front_page_problems(readme)
    assert not problems, "\n".join(problems)
    assert sum(1 for line in readme.splitlines() if re.match(r"^\|[-: |]+\|$", line)) == 2, \
        "the README has two tables: the verbs and the results (the rest lives in docs/)"


def test_the_readmes_verb_table_names_every_verb():
    """The front page's table of verbs lists each verb the CLI has, by its name in backticks."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith(("| [`", "| `"))]
    shown = {name for row in rows for name in re.findall(r"`([a-z][a-z-]*)`", row.split(" | ")[0])}
    assert set(cli_options()) - shown == set()


# The checks themselves: they must be able to fail.

def test_the_front_page_check_catches_a_long_readme_and_a_wide_line():
    assert not front_page_problems("# T\n\n" + "x" * README_MAX_WIDTH + "\n")
    assert front_page_problems("\n" * README_MAX_LINES + "one too many") == [
        f"{README_MAX_LINES + 1} lines (at most {README_MAX_LINES})"]
    # width is counted in characters, not bytes: 120 Arabic letters fit, 121 do not
    assert not front_page_problems("ع" * README_MAX_WIDTH)
    assert front_page_problems("ع" * (README_MAX_WIDTH + 1)) == [
        f"line 1: {README_MAX_WIDTH + 1} characters (at most {README_MAX_WIDTH})"]


def test_the_command_check_catches_a_made_up_flag_and_verb():
    options = cli_options()
    block = ("```bash\narabert-pipeline answer --question q \\\n    --made-up-flag 3   # comment --also-ignored\n"
             "arabert-pipeline preprocess a.txt -o b.txt && arabert-pipeline translate x\n"
             "accelerate launch -m arabert_pipeline.cli pretrain --corpus c --no-such=1\n```\n")
    problems = [p for line in bash_commands(block) for p in check_command_line(line, options)]
    assert len(problems) == 3, problems
    assert "`answer` has no option --made-up-flag" in problems[0]
    assert "unknown verb 'translate'" in problems[1]
    assert "`pretrain` has no option --no-such" in problems[2]
    # a flag of another verb is refused too; a real one is not
    assert check_command_line("arabert-pipeline serve --demo", options)
    assert not check_command_line("arabert-pipeline --debug answer --demo | head", options)


def test_the_link_check_catches_a_broken_link_and_anchor(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "REPO", tmp_path)  # problems are named relative to REPO
    (tmp_path / "there.md").write_text("# Title\n\n## A section, with (punctuation)\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#a-section-with-punctuation) [gone](missing.md) [bad](there.md#nope) "
                    "[web](https://example.org/x) `[code](missing2.md)` ![img](img.png)\n", encoding="utf-8")
    problems = check_links(page)
    assert len(problems) == 3, problems
    assert any("missing.md" in p for p in problems) and any("#nope" in p for p in problems)
    assert any("img.png" in p for p in problems)
