"""An IAM policy evaluator for the rehearsal: does a role's policy allow one action on one resource?

Standard library only: the function host (``host.py``) loads this file into each function's
interpreter, which has nothing but the bundle and the Lambda runtime's boto3 on its path.

It follows AWS's evaluation for a single account: an explicit ``Deny`` wins, then any ``Allow``,
else the call is implicitly denied. ``Action``/``NotAction`` and ``Resource``/``NotResource`` match
with ``*`` and ``?`` wildcards (actions case-insensitively); the condition operators Rebound's
templates use are evaluated, and any other operator fails closed (the statement does not match, and
the decision says which operator it could not evaluate).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

Statement = Mapping[str, Any]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    """``allowed``, ``explicit deny (Sid)``, or ``no statement allows it``."""


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


@lru_cache(maxsize=4096)
def _pattern(glob: str, ignore_case: bool) -> re.Pattern[str]:
    # fnmatch's translate also gives [] a meaning IAM does not: escape it first.
    escaped = glob.replace("[", "\0").replace("]", "\1")
    regex = fnmatch.translate(escaped).replace("\0", r"\[").replace("\1", r"\]")
    return re.compile(regex, re.IGNORECASE if ignore_case else 0)


def glob_match(glob: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM's wildcard match: ``*`` any run of characters (``/`` and ``:`` too), ``?`` one."""
    return _pattern(glob, ignore_case).match(value) is not None


def action_matches(patterns: Iterable[str], action: str) -> bool:
    return any(glob_match(p, action, ignore_case=True) for p in patterns)


def resource_matches(patterns: Iterable[str], resource: str) -> bool:
    return any(glob_match(p, resource) for p in patterns)


_CONDITIONS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda want, have: have == want,
    "StringNotEquals": lambda want, have: have != want,
    "StringLike": lambda want, have: glob_match(want, have),
    "StringNotLike": lambda want, have: not glob_match(want, have),
    "ArnEquals": lambda want, have: have == want,
    "ArnLike": lambda want, have: glob_match(want, have),
    "ArnNotLike": lambda want, have: not glob_match(want, have),
    "Bool": lambda want, have: str(have).lower() == str(want).lower(),
}


class UnknownCondition(ValueError):
    pass


def conditions_hold(conditions: Mapping[str, Any], context: Mapping[str, str]) -> bool:
    """Every operator's every key must hold; a key missing from the context fails (no IfExists)."""
    for operator, keys in conditions.items():
        check = _CONDITIONS.get(operator)
        if check is None:
            raise UnknownCondition(operator)
        negated = "Not" in operator
        for key, wanted in keys.items():
            have = context.get(key)
            if have is None:
                return False
            matched = any(check(str(w), have) for w in _as_list(wanted))
            if negated:
                matched = all(check(str(w), have) for w in _as_list(wanted))
            if not matched:
                return False
    return True


def statement_applies(st: Statement, action: str, resource: str, context: Mapping[str, str]) -> bool:
    if "Action" in st and not action_matches(_as_list(st["Action"]), action):
        return False
    if "NotAction" in st and action_matches(_as_list(st["NotAction"]), action):
        return False
    if "Resource" in st and not resource_matches(_as_list(st["Resource"]), resource):
        return False
    if "NotResource" in st and resource_matches(_as_list(st["NotResource"]), resource):
        return False
    return conditions_hold(st.get("Condition") or {}, context)


def evaluate(
    statements: Iterable[Statement], action: str, resource: str, context: Mapping[str, str] | None = None
) -> Decision:
    context = context or {}
    allowed = False
    for st in statements:
        try:
            applies = statement_applies(st, action, resource, context)
        except UnknownCondition as exc:
            if st.get("Effect") == "Deny":  # a Deny we cannot read is taken to apply: fail closed
                return Decision(False, f"explicit deny (condition {exc} not evaluated)")
            continue
        if not applies:
            continue
        if st.get("Effect") == "Deny":
            return Decision(False, f"explicit deny ({st.get('Sid') or 'statement without Sid'})")
        if st.get("Effect") == "Allow":
            allowed = True
    return Decision(True, "allowed") if allowed else Decision(False, "no statement allows it")


def principal_matches(principal: Any, arn: str) -> bool:
    """Whether a resource policy's ``Principal`` names ``arn`` (an ``AWS`` principal, or ``*``)."""
    if principal == "*":
        return True
    if not isinstance(principal, Mapping):
        return False
    return any(p == "*" or p == arn for p in _as_list(principal.get("AWS")))


def account_root(arn: str) -> str:
    """``arn:aws:iam::<account>:root`` of the account ``arn`` belongs to."""
    parts = arn.split(":")
    return f"arn:{parts[1]}:iam::{parts[4]}:root"


def evaluate_with_key_policy(
    role_arn: str,
    role_statements: Iterable[Statement],
    key_policy: Iterable[Statement],
    action: str,
    resource: str,
) -> Decision:
    """A KMS key's access: its key policy allows the role itself, or allows the account (which
    delegates to IAM) and the role's policy allows it too. A Deny in either wins."""
    role_statements = list(role_statements)
    direct = [st for st in key_policy if principal_matches(st.get("Principal"), role_arn)]
    by_account = [st for st in key_policy if principal_matches(st.get("Principal"), account_root(role_arn))]
    for statements in (direct, by_account, role_statements):
        decision = evaluate(statements, action, resource)
        if decision.reason.startswith("explicit deny"):
            return decision
    if evaluate(direct, action, resource).allowed:
        return Decision(True, "allowed by the key policy")
    if evaluate(by_account, action, resource).allowed:
        return evaluate(role_statements, action, resource)
    return Decision(False, "the key policy allows it neither to the role nor to the account")
