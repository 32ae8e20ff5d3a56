"""YAML loading with errors that say where."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rebound.domain.errors import ConfigError, PolicyNotFound
from rebound.domain.planning import CONFLICTS_SECTION, SLA_SECTION, PlanningDefaults
from rebound.domain.retry_policy import POLICY_FIELDS, RetryPolicy
from rebound.domain.task import Task
from rebound.domain.workstreams import ResourceSpec, TaskDocument, Workstream, reference_problems, task_key

M = TypeVar("M", bound=BaseModel)

DEFAULT_POLICY_FILE = "default_policy.yaml"
POLICIES_FILE = "retry-policies.yaml"


def key_path(loc: tuple[int | str, ...]) -> str:
    """``('tasks', 2, 'schedule', 'cron')`` -> ``tasks[2].schedule.cron``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _clean_loc(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    # Discriminated unions and validators add tags such as 'sim' or 'function-after[...]'.
    return tuple(
        p
        for p in loc
        if isinstance(p, int) or ("[" not in p and p not in {"sim", "lambda", "http", "plugin"})
    )


def problem(err: Mapping[str, Any], noun: str = "key") -> str:
    """What one pydantic error says, in Rebound's words (``noun``: a file's key, a request's field)."""
    if err["type"] == "extra_forbidden":
        return f"unknown {noun} (check the spelling)"
    if err["type"] == "missing":
        return f"required {noun} is missing"
    return str(err["msg"]).removeprefix("Value error, ")


def config_error(file: str, exc: ValidationError, prefix: tuple[int | str, ...] = ()) -> ConfigError:
    """The first validation error, as a ConfigError; the others are listed after it."""
    problems = [(key_path(prefix + _clean_loc(tuple(err["loc"]))), problem(err)) for err in exc.errors()]
    where, msg = problems[0]
    if len(problems) > 1:
        msg += "; also " + "; ".join(f"{w or '(top)'}: {m}" for w, m in problems[1:4])
    return ConfigError(file, where, msg)


def load_yaml(path: Path | str) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), "", "file not found") from None
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), where, f"not valid YAML: {problem}") from None


def _validate(model: type[M], data: Any, file: str, prefix: tuple[int | str, ...] = ()) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise config_error(file, exc, prefix) from None


# --------------------------------------------------------------------------- policies


@dataclass
class PolicyBook:
    """The defaults plus every named policy, each as the partial mapping its file gives."""

    defaults: dict[str, Any]
    named: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    source: str = "<memory>"
    planning: PlanningDefaults = field(default_factory=PlanningDefaults)
    """The ``conflicts:`` and ``sla:`` sections of the defaults file (the dry run, the SLA report)."""

    def names(self) -> list[str]:
        return sorted(self.named)

    def policy(self, name: str) -> RetryPolicy:
        if name not in self.named:
            raise PolicyNotFound(
                f"unknown retry policy {name!r}; known: {', '.join(self.names()) or 'none'}", name=name
            )
        return build_policy(name, self.defaults, self.named[name], self.versions.get(name, 0), self.source)


def merge_spec(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` applied; a section (a mapping such as ``target_budget``) is merged
    key by key, so changing one of its keys keeps the others."""
    out = dict(base)
    for key, value in changes.items():
        before = out.get(key)
        out[key] = (
            {**before, **value} if isinstance(value, Mapping) and isinstance(before, Mapping) else value
        )
    return out


def build_policy(
    name: str,
    defaults: Mapping[str, Any],
    spec: Mapping[str, Any],
    version: int = 0,
    file: str = "<policy>",
    prefix: tuple[int | str, ...] = (),
) -> RetryPolicy:
    merged = {**merge_spec(defaults, spec), "name": name, "version": version}
    return _validate(RetryPolicy, merged, file, (*prefix, name))


def load_policy_book(config_dir: Path | str) -> PolicyBook:
    """Load ``default_policy.yaml`` and ``retry-policies.yaml`` and validate every policy."""
    config_dir = Path(config_dir)
    defaults_file = config_dir / DEFAULT_POLICY_FILE
    policies_file = config_dir / POLICIES_FILE
    defaults = load_yaml(defaults_file)
    if not isinstance(defaults, dict):
        raise ConfigError(str(defaults_file), "", "expected a mapping of policy keys")
    planning = planning_defaults(defaults, str(defaults_file))
    defaults = {k: v for k, v in defaults.items() if k not in (CONFLICTS_SECTION, SLA_SECTION)}
    for key in defaults:
        if key not in POLICY_FIELDS:
            raise ConfigError(str(defaults_file), str(key), "unknown key (check the spelling)")
    max_wait = float(_validate(RetryPolicy, {**defaults, "name": "defaults"}, str(defaults_file)).max_wait)
    if planning.conflicts.mutex_max_wait > max_wait:
        raise ConfigError(
            str(defaults_file),
            f"{CONFLICTS_SECTION}.mutex_max_wait",
            f"{planning.conflicts.mutex_max_wait:g}s is longer than max_wait ({max_wait:g}s), past "
            "which a waiting run is dead-lettered: no wait could ever reach it",
        )

    raw = load_yaml(policies_file)
    if not isinstance(raw, dict) or not isinstance(raw.get("policies"), dict):
        raise ConfigError(str(policies_file), "policies", "expected a mapping of policy name to settings")
    named: dict[str, dict[str, Any]] = {}
    for name, spec in raw["policies"].items():
        spec = spec or {}
        if not isinstance(spec, dict):
            raise ConfigError(str(policies_file), f"policies.{name}", "expected a mapping of policy keys")
        for key in spec:
            if key not in POLICY_FIELDS:
                raise ConfigError(
                    str(policies_file), f"policies.{name}.{key}", "unknown key (check the spelling)"
                )
        named[str(name)] = dict(spec)
        build_policy(str(name), defaults, spec, 0, str(policies_file), ("policies",))
    if "default" not in named:
        raise ConfigError(str(policies_file), "policies", "a policy named 'default' is required")
    return PolicyBook(defaults=dict(defaults), named=named, source=str(policies_file), planning=planning)


def planning_defaults(defaults: Mapping[str, Any], file: str) -> PlanningDefaults:
    """The ``conflicts:`` and ``sla:`` sections of a defaults file, checked; each missing section
    takes its defaults. An error names the file and the key (``conflicts.mutex_max_wait``)."""
    sections: dict[str, Any] = {}
    for name in (CONFLICTS_SECTION, SLA_SECTION):
        if name not in defaults:
            continue
        value = defaults[name]
        if not isinstance(value, dict):
            raise ConfigError(
                file, name, f"expected a mapping of {name} settings, got {type(value).__name__}"
            )
        sections[name] = value
    return _validate(PlanningDefaults, sections, file)


def resolve_policy(task: Task, book: PolicyBook) -> RetryPolicy:
    """The policy a task runs under: its named policy, plus its inline overrides."""
    spec = task.retry_policy
    if isinstance(spec, str):
        return book.policy(spec)
    base = book.policy(spec.extends)
    merged = {**base.model_dump(mode="json"), **spec.changes()}
    return _validate(RetryPolicy, merged, f"task {task.id}", ("retry_policy",))


# --------------------------------------------------------------------------- task files


def parse_task_file(data: Any, file: str, book: PolicyBook | None = None) -> list[Task]:
    """Validate a task file's content. With a policy book, named policies must exist and resolve."""
    return parse_task_document(data, file, book).tasks


def parse_task_document(
    data: Any, file: str, book: PolicyBook | None = None, known_tasks: Mapping[str, str] | None = None
) -> TaskDocument:
    """The whole task file: its tasks, its tenants' settings, its workstreams and resources.

    A workstream's steps may name the file's tasks and ``known_tasks`` (task id -> tenant, e.g. the
    tasks already registered)."""
    if not isinstance(data, dict) or "tasks" not in data:
        raise ConfigError(file, "tasks", "expected a top-level 'tasks:' list")
    parsed = _validate(TaskDocument, data, file)
    check_workstreams(
        parsed.workstreams,
        parsed.resources,
        {**(known_tasks or {}), **{t.id: t.tenant for t in parsed.tasks}},
        file,
    )
    if book is not None:
        for index, task in enumerate(parsed.tasks):
            try:
                resolve_policy(task, book)
            except PolicyNotFound as exc:
                raise ConfigError(file, f"tasks[{index}].retry_policy", exc.message) from None
            except ConfigError as exc:
                raise ConfigError(file, f"tasks[{index}].retry_policy.{exc.key_path}", exc.problem) from None
    return parsed


def load_task_file(path: Path | str, book: PolicyBook | None = None) -> list[Task]:
    return parse_task_file(load_yaml(path), str(path), book)


def load_task_document(
    path: Path | str, book: PolicyBook | None = None, known_tasks: Mapping[str, str] | None = None
) -> TaskDocument:
    return parse_task_document(load_yaml(path), str(path), book, known_tasks)


def check_workstreams(
    workstreams: list[Workstream],
    resources: list[ResourceSpec],
    tasks: Mapping[str, str],
    file: str,
    prefix: tuple[int | str, ...] = (),
) -> None:
    """Refuse unknown tasks and resources, a step listed twice and a dependency cycle (its path is
    in the message: ``extract → transform → extract``); the first problem names its key path, the
    next few follow it."""
    problems = reference_problems(workstreams, resources, tasks)
    if not problems:
        for ws in workstreams:  # each step runs its tenant's task: the one place a step gets its key
            ws.steps = [s.model_copy(update={"task_key": task_key(ws, s.task, tasks)}) for s in ws.steps]
        return
    where, msg = problems[0]
    if len(problems) > 1:
        msg += "; also " + "; ".join(f"{key_path(prefix + w)}: {m}" for w, m in problems[1:4])
    raise ConfigError(file, key_path(prefix + where), msg)
