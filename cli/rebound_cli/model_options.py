"""Click options made from a request model's fields, so a command and the ops API it mirrors take
the same inputs with the same defaults and descriptions: ``max_retry_attempts`` is
``--max-retry-attempts``, a boolean is a flag. The model validates what the options gather
(``request``), and an error names the option (``--max-retry-attempts: ...``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click
from pydantic import BaseModel, ValidationError

from rebound.ops.common import validation_failed

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=BaseModel)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def model_options(model: type[BaseModel], names: Iterable[str], **defaults: Any) -> Callable[[F], F]:
    """A decorator adding an option per field in ``names``; ``defaults`` replace the model's."""
    options = []
    for name in names:
        info = model.model_fields[name]
        default = defaults.get(name, info.default)
        kind: dict[str, Any] = {"is_flag": True} if info.annotation is bool else {}
        if not kind and info.annotation in (int, float):
            kind = {"type": info.annotation}
        options.append(
            click.option(
                flag(name),
                name,
                default=default,
                show_default=default is not None,
                help=info.description,
                **kind,
            )
        )

    def decorate(fn: F) -> F:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def request(model: type[M], values: dict[str, Any]) -> M:
    """``values`` (gathered from the options) as ``model``; a bad one is named as its option."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise validation_failed(exc, as_option=True) from None
