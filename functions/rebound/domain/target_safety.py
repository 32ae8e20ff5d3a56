"""What a target may reach, checked when a task is registered and again before each call.

An environment's ``TargetRules`` say which hosts may be called over plain http, which networks
outside the public internet may be reached, whose error answers are kept, and whether the ``sim``
target exists. Everything else is refused:

- a URL that is not ``https`` (unless its host is in ``plain_http_hosts``);
- an address that is not global unicast (loopback, link-local with the instance metadata
  service at 169.254.169.254, private, shared, reserved, multicast, unspecified, and their IPv6
  forms, IPv4-mapped and NAT64 addresses included) unless it is in ``allow_networks``;
- a task whose event pattern could match Rebound's own events (it would trigger itself).

At registration a literal address is checked; at call time the name is resolved, every address
it resolves to is checked, and the connection goes to the checked address (``resolve``), so a
second answer from DNS cannot switch it. A refusal at call time is ``TARGET_REFUSED``: terminal.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from rebound.domain.target_specs import HttpTarget, SecretHeader, TargetRules
from rebound.domain.task import Task
from rebound.domain.tenancy import secret_problem

TARGET_REFUSED = "TARGET_REFUSED"

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_LITERAL = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)


class TargetRefused(Exception):
    """A target the environment's rules do not allow; ``field`` names where in the task."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


# --------------------------------------------------------------------------- addresses


def _embedded_ipv4(ip: IpAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(ip: IpAddress, rules: TargetRules) -> str | None:
    """Why ``ip`` may not be reached under ``rules``, or None when it may."""
    if any(ip in ipaddress.ip_network(net, strict=False) for net in rules.allow_networks):
        return None
    inner = _embedded_ipv4(ip)
    if inner is not None:
        why = address_refusal(inner, rules)
        return f"{ip} carries {inner}: {why}" if why else None
    if ip.is_loopback:
        kind = "a loopback address"
    elif ip.is_link_local:
        kind = "a link-local address (the instance metadata service lives there)"
    elif ip.is_multicast:
        kind = "a multicast address"
    elif ip.is_unspecified:
        kind = "the unspecified address"
    elif ip.is_private:
        kind = "a private address"
    elif ip.is_reserved or not ip.is_global:
        kind = "a reserved address"
    else:
        return None
    return f"{ip} is {kind}; add its network to targets.allow_networks to reach it"


def literal_address(host: str) -> IpAddress | None:
    """The address a URL's host names literally (``10.0.0.1``, ``[::1]``, ``0x7f.1``), or None."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _IPV4_LITERAL.match(host):  # the forms inet_aton accepts: 127.1, 2130706433, 0x7f000001
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def check_url(url: str, rules: TargetRules, field: str = "target.url") -> None:
    """What can be checked without DNS: the scheme, and a literal address. Raises ``TargetRefused``."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        _ = parts.port
    except ValueError as exc:
        raise TargetRefused(field, f"{url!r} is not a valid URL: {exc}") from None
    if not host:
        raise TargetRefused(field, "the URL names no host")
    if parts.scheme != "https" and host not in rules.plain_http_hosts:
        raise TargetRefused(
            field,
            f"plain {parts.scheme} to {host} is not allowed here; use https, or list the host in the "
            "environment's targets.plain_http_hosts",
        )
    ip = literal_address(host)
    if ip is not None:
        why = address_refusal(ip, rules)
        if why:
            raise TargetRefused(field, why)


# --------------------------------------------------------------------------- event patterns


def _value_matches(item: Any, source: str) -> bool:
    """Whether one entry of a pattern's ``source`` array could match ``source`` (conservative)."""
    if isinstance(item, str):
        return item == source
    if not isinstance(item, dict):
        return False
    if len(item) != 1:
        return True
    ((kind, arg),) = item.items()
    if kind == "prefix":
        arg = arg.get("equals-ignore-case", "") if isinstance(arg, dict) else arg
        return isinstance(arg, str) and source.lower().startswith(arg.lower())
    if kind == "suffix":
        arg = arg.get("equals-ignore-case", "") if isinstance(arg, dict) else arg
        return isinstance(arg, str) and source.lower().endswith(arg.lower())
    if kind == "equals-ignore-case":
        return isinstance(arg, str) and arg.lower() == source.lower()
    if kind == "wildcard":
        return isinstance(arg, str) and fnmatch.fnmatchcase(source, arg.replace("[", "[[]"))
    if kind == "exists":
        return arg is not False
    if kind == "anything-but":
        excluded = arg if isinstance(arg, list) else [arg]
        return not any(_value_matches(x, source) if isinstance(x, dict) else x == source for x in excluded)
    return kind not in ("numeric", "cidr")  # a filter this check does not know: assume it can match


def self_trigger_problem(pattern: dict[str, Any], source: str) -> str | None:
    """Why an event pattern could match Rebound's own events (``source``), or None."""
    branches = pattern.get("$or")
    if isinstance(branches, list):
        rest = {k: v for k, v in pattern.items() if k != "$or"}
        for branch in branches:
            if isinstance(branch, dict):
                why = self_trigger_problem({**rest, **branch}, source)
                if why:
                    return why
        if "source" not in rest:
            return None
    values = pattern.get("source")
    if values is None:
        return (
            f"event.source is missing: the pattern could match Rebound's own events (source "
            f"{source!r}) and trigger the task endlessly; name the sources it listens to"
        )
    if not isinstance(values, list) or any(_value_matches(v, source) for v in values):
        return (
            f"event.source could match Rebound's own events (source {source!r}): the task would "
            "trigger itself endlessly; list other sources, or exclude it"
        )
    return None


# --------------------------------------------------------------------------- registration


def secret_references(target: object) -> list[tuple[str, str]]:
    """The secrets an http target names, each as (field, reference)."""
    if not isinstance(target, HttpTarget):
        return []
    refs = [("target.secret", target.secret)] if target.secret else []
    refs += [
        (f"target.headers.{name}.secret", given.secret)
        for name, given in target.headers.items()
        if isinstance(given, SecretHeader)
    ]
    return refs


def task_problems(
    task: Task, rules: TargetRules, event_source: str, environment: str | None = None
) -> Iterable[tuple[str, str]]:
    """Every reason the environment refuses ``task``, each as (field, message); with
    ``environment``, also each secret it names outside its tenant's secrets."""
    target = task.target
    if environment is not None:
        for where, reference in secret_references(target):
            why = secret_problem(reference, environment, task.tenant)
            if why:
                yield where, why
    if target.type == "sim" and not rules.sim:
        yield "target.type", "the sim target is not enabled in this environment (targets.sim)"
    if isinstance(target, HttpTarget):  # a plugin target too
        try:
            check_url(target.endpoint, rules)
        except TargetRefused as exc:
            yield exc.field, exc.message
    if task.capacity_reserve is not None:
        try:
            check_url(task.capacity_reserve.endpoint, rules)
        except TargetRefused as exc:
            yield "capacity_reserve.url", exc.message
        if environment is not None:
            for where, reference in secret_references(task.capacity_reserve):
                why = secret_problem(reference, environment, task.tenant)
                if why:
                    yield "capacity_reserve." + where.removeprefix("target."), why
    if task.event is not None:
        why = self_trigger_problem(task.event, event_source)
        if why:
            yield "event.source", why


# --------------------------------------------------------------------------- redaction

_REDACTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{6,}"), r"\1 [redacted]"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"), "[redacted-jwt]"),
    (re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"), "[redacted-aws-key]"),
    (
        re.compile(
            r"(?i)([\"']?[\w-]*(?:key|token|secret|password|passwd|signature|session|auth|cookie)"
            r"[\w-]*[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&}]+"
        ),
        r"\1[redacted]",
    ),
    (re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"), "[redacted-email]"),
    (re.compile(r"\b[A-Za-z0-9+/_-]{32,}={0,2}"), "[redacted]"),
)


def redact(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with credentials, keys, tokens and email addresses replaced, and every ``known``
    value (the secrets the request carried) removed wherever it appears."""
    for value in known:
        if value:
            text = text.replace(value, "[redacted]")
    for pattern, replacement in _REDACTIONS:
        text = pattern.sub(replacement, text)
    return text
