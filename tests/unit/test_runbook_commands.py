"""Every ``rebound ...`` command in docs/runbooks, and in every command's ``--help`` examples, is
one the CLI accepts: the command path exists, every option exists, an option that takes a value
has one, values of choices and numbers are valid, and there are no more arguments than the
command takes.

Placeholders in capitals (``RUN_ID``, ``TASK_ID``, ``N``) stand for any valid value; ``...``
stands for "and more"; ``[--opt X]`` is an optional part; ``a\\|b`` in a Markdown table means
either. A command may leave out required arguments and options (a prose mention such as
``rebound runs show``), but whatever it gives must parse.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from rebound_cli.app import cli

pytestmark = pytest.mark.unit
RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"
START = re.compile(r"(?<![\w./-])rebound(?=[ \t]+[-a-z])")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")
STOP = {"|", "||", "&&", ";", "&", "(", ")", ">", ">>", "<"}


# --------------------------------------------------------------------------- finding commands


def _joined(text: str) -> str:
    """Shell line continuations joined (the line numbers after one shift; good enough to find it)."""
    return re.sub(r"\\\n[ \t]*", " ", text)


def code_text(markdown: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of what is code: whole lines in fences, inline spans elsewhere."""
    fenced = False
    for number, line in enumerate(_joined(markdown).splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            yield number, line
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield number, span


def commands_in(text: str) -> Iterator[str]:
    """Each ``rebound ...`` command in a piece of code, up to a pipe, a comment, an arrow, a
    backtick or the next command."""
    starts = [m.start() for m in START.finditer(text)]
    for start, end in zip(starts, [*starts[1:], len(text)], strict=False):
        yield text[start:end].split("`")[0].split("→")[0].strip()


def tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    out: list[str] = []
    for token in lexer:
        if token in STOP or token.startswith("#"):
            break
        out.append(token)
    return out


def runbook_commands() -> list[tuple[str, str]]:
    found = []
    for page in sorted(RUNBOOKS.glob("*.md")):
        for number, text in code_text(page.read_text(encoding="utf-8")):
            found += [(f"{page.name}:{number}", command) for command in commands_in(text)]
    return found


def _walk(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from _walk(command, (*prefix, name))


def help_example_commands() -> list[tuple[str, str]]:
    from click.testing import CliRunner

    found = []
    for path in [(), *_walk(cli)]:
        output = CliRunner().invoke(cli, [*path, "--help"], prog_name="rebound").output
        examples = output.split("Example", 1)[1] if "Example" in output else ""
        for line in _joined(examples.split("Options:", 1)[0]).splitlines():
            found += [(" ".join(("rebound", *path, "--help")), c) for c in commands_in(line.strip())]
    return found


# --------------------------------------------------------------------------- checking them


def _option(command: click.Command, name: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    return None


def _takes_value(option: click.Option) -> bool:
    return not option.is_flag and not option.count


def _check_value(option: click.Parameter, value: str) -> str | None:
    if PLACEHOLDER.match(value) or value == "..." or isinstance(option.type, click.Path):
        return None  # a placeholder, or a file that exists where the command runs
    try:
        option.type.convert(value, option, None)
    except click.BadParameter as exc:
        return f"{option.name}: {exc.message}"
    return None


def _parse_options(
    command: click.Command, words: list[str], positionals: list[str], *, stop_at_command: bool
) -> tuple[int, str | None]:
    """Consume ``command``'s options from ``words``; returns (words used, problem)."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "...":
            i += 1
            continue
        if not word.startswith("-") or word == "-":
            if stop_at_command:
                return i, None
            positionals.append(word)
            i += 1
            continue
        name, has_value, value = word.partition("=")
        option = _option(command, name)
        if option is None:
            return i, f"no option {name}"
        i += 1
        if not _takes_value(option):
            if has_value:
                return i, f"{name} takes no value"
            continue
        if not has_value:
            if i >= len(words) or (words[i].startswith("-") and words[i] != "-"):
                return i, f"{name} needs a value"
            value = words[i]
            i += 1
        problem = _check_value(option, value)
        if problem:
            return i, problem
    return i, None


def _alternatives(words: list[str]) -> list[list[str]]:
    """``replayed|fixed`` (an escaped pipe in a Markdown table) is two commands."""
    for index, word in enumerate(words):
        if "|" in word:
            return [
                variant
                for alt in word.split("|")
                for variant in _alternatives([*words[:index], alt, *words[index + 1 :]])
            ]
    return [words]


def _unbracket(words: list[str]) -> list[str]:
    out = []
    for word in words:
        if word.startswith("[-"):
            word = word[1:]
        if word.endswith("]") and "[" not in word:
            word = word[:-1]
        out.append(word)
    return out


def problem_with(command: str) -> str | None:
    """Why ``command`` would not parse, or ``None``."""
    words = _unbracket(tokens(command))
    assert words and words[0] == "rebound", command
    for variant in _alternatives(words[1:]):
        problem = _problem(variant)
        if problem:
            return problem
    return None


def _problem(words: list[str]) -> str | None:
    current: click.Command = cli
    path = ["rebound"]
    while isinstance(current, click.Group):
        used, problem = _parse_options(current, words, [], stop_at_command=True)
        if problem:
            return f"{' '.join(path)}: {problem}"
        words = words[used:]
        if not words:
            return f"{' '.join(path)} names a group, not a command"
        sub = current.commands.get(words[0])
        if sub is None:
            return f"{' '.join(path)} has no command {words[0]!r}"
        current, path, words = sub, [*path, words[0]], words[1:]
    positionals: list[str] = []
    _, problem = _parse_options(current, words, positionals, stop_at_command=False)
    if problem:
        return f"{' '.join(path)}: {problem}"
    arguments = [p for p in current.params if isinstance(p, click.Argument)]
    if any(a.nargs < 0 for a in arguments):
        return None
    if len(positionals) > sum(a.nargs for a in arguments):
        return f"{' '.join(path)}: unexpected extra argument(s) {positionals[len(arguments) :]}"
    for argument, value in zip(arguments, positionals, strict=False):
        problem = _check_value(argument, value)
        if problem:
            return f"{' '.join(path)}: {problem}"
    return None


# --------------------------------------------------------------------------- tests


def test_the_runbooks_have_commands_to_check() -> None:
    found = runbook_commands()
    pages = {where.split(":")[0] for where, _ in found}
    assert len(found) > 100
    assert {"executor-errors.md", "retry-scheduler-errors.md", "execution-backlog.md"} <= pages


def test_every_rebound_command_in_the_runbooks_parses() -> None:
    problems = [
        f"{where}: {command!r}: {p}" for where, command in runbook_commands() if (p := problem_with(command))
    ]
    assert not problems, "\n".join(problems)


def test_every_example_in_the_help_parses() -> None:
    found = help_example_commands()
    assert len(found) > 40
    problems = [f"{where}: {command!r}: {p}" for where, command in found if (p := problem_with(command))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("rebound runs list --state failed", "rebound runs list: no option --state"),
        ("rebound runs nope RUN_ID", "rebound runs has no command 'nope'"),
        ("rebound runs list --status nope", "rebound runs list: status: 'nope' is not one of"),
        ("rebound runs list --limit lots", "rebound runs list: limit: 'lots' is not a valid integer"),
        ("rebound runs show A B", "rebound runs show: unexpected extra argument(s) ['B']"),
        ("rebound dlq redrive --dry-run=yes", "rebound dlq redrive: --dry-run takes no value"),
        ("rebound runs skip RUN_ID --reason", "rebound runs skip: --reason needs a value"),
        ("rebound --output xml health", "rebound: output: 'xml' is not one of"),
        ("rebound dlq", "rebound dlq names a group, not a command"),
        ("rebound workorders resolve WO --resolution replayed\\|fixd", "'fixd' is not one of"),
    ],
)
def test_the_check_finds_what_does_not_parse(command: str, problem: str) -> None:
    found = problem_with(command)
    assert found is not None and problem in found, found


@pytest.mark.parametrize(
    "command",
    [
        "rebound -o json runs list --status dead_lettered --limit 1000 | jq -r '.[] | .run_id'",
        'rebound runs skip RUN_ID --reason "attempt 2 took effect (key RUN_ID#2)" --yes   # comment',
        "rebound dlq list [--task ID] [--error-code CODE] [--since 2h]",
        "rebound policies set NAME terminal_errors=[BAD_INPUT,NOT_FOUND] --dry-run",
        "rebound dlq archive --since ... --delete",
        "rebound tasks preview TASK_ID --count N",
        "rebound runs show",
    ],
)
def test_the_check_accepts_placeholders_mentions_and_shell_around_a_command(command: str) -> None:
    assert problem_with(command) is None
