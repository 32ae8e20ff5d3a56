"""A run's JSON form (``Run.model_validate(fields).model_dump(mode="json")``) from plain JSON
values, without building the model, for the values whose form is known without pydantic.

``rebound audit verify --all`` rebuilds every run from its trail and compares it with the stored
run; building and dumping a ``Run`` was most of what it spent on a run. Here each field's value is
checked against its annotation and taken as it is when pydantic would hand it back unchanged:
text for ``str``, an ``int`` (not a ``bool``) within its ``ge``/``le`` for ``int``, an enum's
value, a timestamp already in its one form (``timefmt.iso``: ``2026-03-07T02:00:00.000Z``, a day
that exists), lists of those, attempts as dicts of those (their unset fields filled in with their
defaults, as the model fills them). Anything else (a float, an event's detail, budget overrides,
a timestamp written another way, a key the model does not have, a required field missing) makes
``json_form`` answer ``None``, and the caller asks pydantic: what this vouches for is always
exactly what pydantic answers (``tests/property_based/test_run_form_properties.py``), and it
vouches for nothing at all if either model gains a validator, a serializer or a config it does not
mirror (it mirrors one: a run's tenant is the one its task key names).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum
from functools import lru_cache
from typing import Any

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, PlainSerializer

from rebound.domain.run import Attempt, AttemptOutcome, Run, RunState, Trigger
from rebound.domain.tenancy import tenant_of
from rebound.domain.timefmt import iso, parse_utc


class _NotPlain(Exception):
    """A value whose JSON form this module does not vouch for: pydantic decides."""


Form = Callable[[Any], Any]
"""A field's value -> its JSON form, or ``_NotPlain``."""

_ISO = re.compile(
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z"
)
_INT_LIMIT = 1 << 63


@lru_cache(maxsize=4096)
def _day_exists(day: str) -> bool:
    try:
        return iso(parse_utc(f"{day}T00:00:00.000Z")).startswith(day)
    except ValueError:
        return False


def _timestamp(value: Any) -> Any:
    if type(value) is str and _ISO.fullmatch(value) and _day_exists(value[:10]):
        return value
    raise _NotPlain


def _text(value: Any) -> Any:
    if type(value) is str:
        return value
    raise _NotPlain


def _flag(value: Any) -> Any:
    if type(value) is bool:
        return value
    raise _NotPlain


def _whole(low: Any, high: Any) -> Form:
    def form(value: Any) -> Any:
        if (
            type(value) is int
            and -_INT_LIMIT < value < _INT_LIMIT
            and (low is None or value >= low)
            and (high is None or value <= high)
        ):
            return value
        raise _NotPlain

    return form


def _member(enum: type[StrEnum]) -> Form:
    values = frozenset(member.value for member in enum)

    def form(value: Any) -> Any:
        if type(value) is str and value in values:
            return value
        raise _NotPlain

    return form


def _optional(inner: Form) -> Form:
    return lambda value: None if value is None else inner(value)


def _list_of(inner: Form) -> Form:
    def form(value: Any) -> Any:
        if type(value) is not list:
            raise _NotPlain
        return [inner(v) for v in value]

    return form


def _nothing_but_none(value: Any) -> Any:
    if value is None:
        return None
    raise _NotPlain


def _bounds(metadata: list[Any]) -> tuple[Any, Any] | None:
    """``(ge, le)`` of a field's metadata; ``None`` if it has any other kind."""
    low: Any = None
    high: Any = None
    for item in metadata:
        if isinstance(item, Ge):
            low = item.ge
        elif isinstance(item, Le):
            high = item.le
        elif not isinstance(item, BeforeValidator | PlainSerializer):
            return None
    return low, high


def _has_hooks(model: type[BaseModel], known: frozenset[str] = frozenset()) -> bool:
    """Whether ``model`` has a validator, serializer or config this module does not mirror
    (``known``: the model validators it does)."""
    hooks = model.__pydantic_decorators__
    return bool(
        model.model_config
        or hooks.validators
        or hooks.field_validators
        or hooks.root_validators
        or hooks.field_serializers
        or hooks.model_serializers
        or set(hooks.model_validators) - known
        or hooks.computed_fields
    )


_MIRRORED = frozenset({"_tenant_of_its_task"})
"""``Run``'s model validators ``json_form`` does as well: a run's tenant is its task key's."""


_TIMESTAMP_HOOKS = ("parse_utc", "iso")


def _forms(model: type[BaseModel], named: dict[str, Form]) -> dict[str, Form]:
    """Each field's form, from its annotation as written (``from __future__ import annotations``
    keeps it text) and its constraints; a field whose annotation or metadata is not one known
    here takes ``None`` only."""
    forms: dict[str, Form] = {}
    for name, info in model.model_fields.items():
        annotation = model.__annotations__.get(name)
        bounds = _bounds(info.metadata)
        optional = isinstance(annotation, str) and annotation.endswith(" | None")
        base = annotation.removesuffix(" | None") if isinstance(annotation, str) else None
        form: Form = _nothing_but_none
        if bounds is not None and base is not None:
            hooks = [getattr(m.func, "__name__", "") for m in info.metadata if hasattr(m, "func")]
            if base == "int":
                form = _whole(*bounds)
            elif bounds == (None, None) and base in named:
                form = named[base]
            if hooks and (base != "UtcDatetime" or tuple(hooks) != _TIMESTAMP_HOOKS):
                form = _nothing_but_none
        forms[name] = _optional(form) if optional and form is not _nothing_but_none else form
    return forms


_NAMED: dict[str, Form] = {
    "str": _text,
    "bool": _flag,
    "UtcDatetime": _timestamp,
    "list[str]": _list_of(_text),
    "list[int]": _list_of(_whole(None, None)),
    "Trigger": _member(Trigger),
    "RunState": _member(RunState),
    "AttemptOutcome": _member(AttemptOutcome),
}


def _json_default(value: Any) -> Any:
    """A default as its JSON form: the defaults here are ``None``, text, numbers, flags, enum
    members and empty lists."""
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, list):
        return list(value)
    return value


def _required_and_defaults(model: type[BaseModel]) -> tuple[frozenset[str], dict[str, Any]]:
    """The names of ``model``'s required fields, and every other field's default in JSON form."""
    fields = model.model_fields
    required = frozenset(n for n, f in fields.items() if f.is_required())
    defaults = {
        n: _json_default(f.get_default(call_default_factory=True))
        for n, f in fields.items()
        if n not in required
    }
    return required, defaults


_ATTEMPT_FORMS = _forms(Attempt, _NAMED)
_ATTEMPT_REQUIRED, _ATTEMPT_DEFAULTS = _required_and_defaults(Attempt)


def _attempt(value: Any) -> Any:
    if type(value) is not dict or not _ATTEMPT_REQUIRED.issubset(value):
        raise _NotPlain
    if not value.keys() <= _ATTEMPT_FORMS.keys():
        raise _NotPlain  # a key the model does not have: pydantic drops it
    return {
        name: form(value[name]) if name in value else _ATTEMPT_DEFAULTS[name]
        for name, form in _ATTEMPT_FORMS.items()
    }


_RUN_FORMS = _forms(Run, {**_NAMED, "list[Attempt]": _list_of(_attempt)})
_RUN_REQUIRED, _RUN_DEFAULTS = _required_and_defaults(Run)
_LIST_DEFAULTS = tuple(n for n, v in _RUN_DEFAULTS.items() if type(v) is list)
_VOUCHES = not (_has_hooks(Run, _MIRRORED) or _has_hooks(Attempt))


def json_form(fields: dict[str, Any]) -> dict[str, Any] | None:
    """``Run.model_validate(fields).model_dump(mode="json")``, or ``None`` where a value is one
    whose form this module does not know (pydantic decides those, and every invalid one)."""
    if not _VOUCHES or not _RUN_REQUIRED.issubset(fields):
        return None
    forms = _RUN_FORMS
    out = dict(_RUN_DEFAULTS)
    try:
        for name, value in fields.items():
            out[name] = forms[name](value)
    except (_NotPlain, KeyError):  # KeyError: a key the model does not have
        return None
    for name in _LIST_DEFAULTS:
        if out[name] is _RUN_DEFAULTS[name]:
            out[name] = []  # the defaults' own lists are never handed out
    owner = tenant_of(out["task_id"])  # as Run's _tenant_of_its_task
    if owner is not None:
        out["tenant"] = owner
    return out
