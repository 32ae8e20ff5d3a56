"""What a target may reach (``rebound.domain.target_safety``) and what registration refuses (issue 14)."""

from __future__ import annotations

import dataclasses
import ipaddress
from datetime import timedelta
from typing import Any

import pytest
from fakes import memory_deps

from rebound.config.loader import parse_task_file
from rebound.domain.basics import MAX_PAYLOAD_BYTES
from rebound.domain.errors import ConfigError, ValidationFailed
from rebound.domain.item_size import ITEM_LIMIT, item_size
from rebound.domain.target_safety import (
    TargetRefused,
    address_refusal,
    check_url,
    redact,
    self_trigger_problem,
)
from rebound.domain.target_specs import TargetRules
from rebound.ops.tasks import TaskOps, write_sizes
from support import task

STRICT = TargetRules()

REFUSED = [
    "127.0.0.1",
    "127.255.0.9",
    "169.254.169.254",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "100.64.0.1",
    "0.0.0.0",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd12:3456::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.1.2.3",
    "64:ff9b::a9fe:a9fe",
    "2002:7f00:1::1",
    "ff02::1",
]
PUBLIC = ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:93.184.216.34"]


@pytest.mark.parametrize("address", REFUSED)
def test_addresses_outside_the_public_internet_are_refused(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address), STRICT)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address), STRICT) is None


def test_allowed_networks_open_only_what_they_name() -> None:
    rules = TargetRules(allow_networks=("10.1.0.0/16",))

    assert address_refusal(ipaddress.ip_address("10.1.2.3"), rules) is None
    assert address_refusal(ipaddress.ip_address("::ffff:10.1.2.3"), rules) is None
    assert address_refusal(ipaddress.ip_address("10.2.0.1"), rules)
    assert address_refusal(ipaddress.ip_address("169.254.169.254"), rules)


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/",
        "https://127.1/",
        "https://2130706433/",
        "https://0x7f000001/",
        "https://[::1]:9001/2018-06-01/runtime/invocation/next",
        "https://[::ffff:169.254.169.254]/",
        "https://10.0.0.7/internal",
    ],
)
def test_a_literal_address_in_a_refused_range_is_refused_without_dns(url: str) -> None:
    with pytest.raises(TargetRefused) as err:
        check_url(url, STRICT)
    assert err.value.field == "target.url"


def test_plain_http_needs_the_host_on_the_allowlist() -> None:
    with pytest.raises(TargetRefused, match="plain_http_hosts"):
        check_url("http://hooks.example.com/x", STRICT)
    check_url("http://hooks.example.com/x", TargetRules(plain_http_hosts=("hooks.example.com",)))
    check_url("https://hooks.example.com/x", STRICT)


# --------------------------------------------------------------------------- self-triggering

SOURCE = "rebound"


@pytest.mark.parametrize(
    "pattern",
    [
        {"source": ["rebound"]},
        {"source": ["billing", "rebound"]},
        {"source": [{"prefix": "reb"}]},
        {"source": [{"prefix": ""}]},
        {"source": [{"suffix": "bound"}]},
        {"source": [{"equals-ignore-case": "REBOUND"}]},
        {"source": [{"wildcard": "re*"}]},
        {"source": [{"anything-but": "billing"}]},
        {"source": [{"anything-but": ["billing", "crm"]}]},
        {"source": [{"anything-but": {"prefix": "bill"}}]},
        {"source": [{"exists": True}]},
        {"source": [{"some-future-filter": "x"}]},
        {"detail-type": ["Invoice Paid"]},
        {"$or": [{"source": ["billing"]}, {"detail-type": ["x"]}]},
    ],
)
def test_patterns_that_could_match_rebounds_own_events_are_refused(pattern: dict[str, Any]) -> None:
    assert self_trigger_problem(pattern, SOURCE)


@pytest.mark.parametrize(
    "pattern",
    [
        {"source": ["billing"]},
        {"source": [{"prefix": "billing."}]},
        {"source": [{"anything-but": ["rebound"]}], "detail-type": ["x"]},
        {"source": [{"anything-but": {"prefix": "reb"}}]},
        {"source": [{"wildcard": "billing.*"}]},
        {"$or": [{"source": ["billing"]}, {"source": ["crm"]}]},
    ],
)
def test_patterns_that_cannot_match_rebound_are_accepted(pattern: dict[str, Any]) -> None:
    assert self_trigger_problem(pattern, SOURCE) is None


# --------------------------------------------------------------------------- registration


def ops(rules: TargetRules | None = None) -> TaskOps:
    world = memory_deps()
    if rules is not None:
        settings = world.deps.settings.model_copy(update={"targets": rules})
        world.deps = dataclasses.replace(world.deps, settings=settings)
    return TaskOps(world.deps, actor="test")


def http_task(url: str, **target: Any) -> Any:
    return task("hook", target={"type": "http", "url": url, **target})


def test_registration_refuses_a_metadata_address_naming_the_field() -> None:
    with pytest.raises(ValidationFailed) as err:
        ops().plan([http_task("https://169.254.169.254/latest/meta-data/iam")])

    assert err.value.details["key_path"] == "target.url"
    assert "link-local" in err.value.message


def test_registration_refuses_plain_http_unless_allowlisted() -> None:
    with pytest.raises(ValidationFailed, match="plain_http_hosts"):
        ops().plan([http_task("http://hooks.example.com/run")])

    allowed = ops(TargetRules(plain_http_hosts=("hooks.example.com",)))
    assert [c.change.value for c in allowed.plan([http_task("http://hooks.example.com/run")])] == ["create"]


def test_the_sim_target_is_refused_where_the_environment_does_not_enable_it() -> None:
    with pytest.raises(ValidationFailed) as err:
        ops(TargetRules.defaults_for("prod")).plan([task("sim-task")])

    assert err.value.details["key_path"] == "target.type"
    assert TargetRules.defaults_for("dev").sim and TargetRules.defaults_for("local").sim
    assert not TargetRules.defaults_for("staging").sim


def test_registration_refuses_a_self_triggering_event_task() -> None:
    looping = task("loop", schedule=None, event={"source": [{"prefix": "io.re"}]})

    with pytest.raises(ValidationFailed) as err:
        ops().plan([looping])

    assert err.value.details["key_path"] == "event.source"


@pytest.mark.parametrize("header", ["Authorization", "X-Api-Key", "Proxy-Authorization", "X-Auth-Token"])
def test_a_plain_text_credential_header_is_refused_with_the_secret_form(header: str) -> None:
    data = {
        "tasks": [
            {
                "id": "hook",
                "tenant": "acme",
                "schedule": {"rate": "1 hour"},
                "target": {"type": "http", "url": "https://x.example.com", "headers": {header: "Bearer abc"}},
            }
        ]
    }

    with pytest.raises(ConfigError) as err:
        parse_task_file(data, "tasks.yaml")

    assert err.value.key_path == "tasks[0].target.headers"
    assert "{secret: ssm:/rebound/" in err.value.problem


def test_a_secret_header_is_stored_as_its_reference_only() -> None:
    t = http_task(
        "https://x.example.com",
        headers={"Authorization": {"secret": "ssm:/rebound/dev/token", "prefix": "Bearer "}},
    )

    assert t.model_dump(mode="json")["target"]["headers"] == {
        "Authorization": {"secret": "ssm:/rebound/dev/token", "prefix": "Bearer "}
    }


# --------------------------------------------------------------------------- item size


def test_item_size_counts_names_and_values_as_dynamodb_does() -> None:
    assert item_size({"id": "abc"}) == 2 + 3
    assert item_size({"n": 12345}) == 1 + 4
    assert item_size({"ok": True, "m": {"a": "xy"}}) == (2 + 1) + (1 + 3 + 1 + 1 + 2)
    assert item_size({"k": "é"}) == 1 + 2
    assert item_size({}, {"k": "é"}) == 3 + len('{"k":"\\u00e9"}')


def test_a_payload_under_256_kib_that_cannot_be_stored_is_refused_at_registration() -> None:
    big = task("big", payload={"blob": "x" * 150_000})
    assert len(str(big.payload)) < MAX_PAYLOAD_BYTES
    assert max(write_sizes(big).values()) > ITEM_LIMIT - 24 * 1024

    with pytest.raises(ValidationFailed) as err:
        ops().plan([big])

    assert err.value.details["key_path"] == "payload"
    assert "audit record of an update" in err.value.message


def test_non_ascii_payloads_are_measured_as_stored() -> None:
    # 60k two-byte characters: 120 KB as UTF-8, 360 KB in the escaped JSON document.
    wide = task("wide", payload={"text": "é" * 60_000})

    with pytest.raises(ValidationFailed, match="too large to store"):
        ops().plan([wide])


def test_a_payload_that_fits_is_accepted() -> None:
    assert ops().plan([task("ok", payload={"blob": "x" * 100_000})])


# --------------------------------------------------------------------------- one-time at


def test_a_one_time_at_in_the_past_is_refused_unless_allowed() -> None:
    o = ops()
    past = o.deps.clock.now() - timedelta(hours=1)
    once = task("once", schedule={"at": past.isoformat()})

    with pytest.raises(ValidationFailed) as err:
        o.plan([once])
    assert err.value.details["key_path"] == "schedule.at"
    assert "--allow-past" in err.value.message

    assert [c.change.value for c in o.plan([once], allow_past=True)] == ["create"]


def test_reapplying_an_unchanged_past_at_is_not_refused() -> None:
    o = ops()
    past = o.deps.clock.now() - timedelta(hours=1)
    once = task("once", schedule={"at": past.isoformat()})
    o.apply(o.plan([once], allow_past=True))

    assert [c.change.value for c in o.plan([once])] == ["unchanged"]


# --------------------------------------------------------------------------- redaction


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("denied: Bearer abcdef123456", "abcdef123456"),
        ('{"error": "bad", "token": "t0k3n-value"}', "t0k3n-value"),
        ("api_key=K3yK3yK3y&x=1", "K3yK3yK3y"),
        ("owner ops@example.com not allowed", "ops@example.com"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl rejected", "eyJzdWIiOiIxIn0"),
        ("key AKIAABCDEFGHIJKLMNOP leaked", "AKIAABCDEFGHIJKLMNOP"),
        ("session 9f8e7d6c5b4a39281706f5e4d3c2b1a0ffeeddcc expired", "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    ],
)
def test_redact_removes_credentials_and_addresses(text: str, secret: str) -> None:
    assert secret not in redact(text)


def test_redact_removes_known_values_wherever_they_appear() -> None:
    assert "hunter2" not in redact("you sent hunter2, which is wrong", known=["hunter2"])
    assert redact("HTTP 503 try later") == "HTTP 503 try later"
