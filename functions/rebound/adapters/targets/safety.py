"""The SSRF guard at call time: the address an http target connects to, every address its name
resolves to checked against the environment's rules (``rebound.domain.target_safety`` holds the
checks of a definition)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

from rebound.domain.target_safety import TargetRefused, address_refusal
from rebound.domain.target_specs import TargetRules

Resolver = Callable[..., list[tuple[Any, ...]]]


def resolve(host: str, port: int, rules: TargetRules, getaddrinfo: Resolver = socket.getaddrinfo) -> str:
    """The address to connect to for ``host``: every address it resolves to must be allowed.

    Raises ``TargetRefused`` (one refused address refuses the name: a name that also points
    inside is not a public target) and ``OSError`` when the name does not resolve.
    """
    infos = getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for info in infos:
        raw = str(info[4][0]).split("%", 1)[0]
        ip = ipaddress.ip_address(raw)
        why = address_refusal(ip, rules)
        if why:
            raise TargetRefused("target.url", f"{host} resolves to {why}")
        addresses.append(str(ip))
    if not addresses:
        raise OSError(f"{host} did not resolve")
    return addresses[0]
