"""The rehearsal's IAM-authorized front door: a SigV4 signature by a known key lets a request in
as that key's identity; anything else is API Gateway's 403, before the function."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from botocore.awsrequest import AWSRequest

from rebound_local.rehearse.sigv4 import Gateway, Refused, Signer, url_of

pytestmark = pytest.mark.unit

BASE = json.loads(
    (Path(__file__).resolve().parents[2] / "events" / "ops_api" / "get-health.json").read_text()
)
ARN = "arn:aws:iam::123456789012:role/Operators"
API = "https://abc.execute-api.us-east-1.amazonaws.com/prod"
GATEWAY = Gateway("us-east-1", {"AKIAOPERATOR": ("s3cret", ARN)})


def test_a_signed_request_comes_in_as_its_keys_identity_under_its_stage() -> None:
    request = Signer("AKIAOPERATOR", "s3cret", "us-east-1").sign(
        "POST", url_of(API, "/runs/r1/retry"), {"reason": "x"}
    )
    event = GATEWAY.admit(request, BASE)
    assert (event["httpMethod"], event["path"]) == ("POST", "/runs/r1/retry")
    assert event["requestContext"]["identity"]["userArn"] == ARN
    assert event["requestContext"]["path"] == "/prod/runs/r1/retry"
    assert json.loads(event["body"]) == {"reason": "x"}


@pytest.mark.parametrize(
    ("request_of", "answer"),
    [
        (lambda: AWSRequest(method="GET", url=url_of(API, "/health")), "Missing Authentication Token"),
        (
            lambda: Signer("AKIAUNKNOWN", "s3cret", "us-east-1").sign("GET", url_of(API, "/tasks")),
            "is invalid",
        ),
        (
            lambda: Signer("AKIAOPERATOR", "wrong", "us-east-1").sign("GET", url_of(API, "/tasks")),
            "does not match",
        ),
        (
            lambda: Signer("AKIAOPERATOR", "s3cret", "eu-west-1").sign("GET", url_of(API, "/tasks")),
            "this region",
        ),
    ],
    ids=["unsigned", "unknown key", "wrong secret", "other region"],
)
def test_anything_else_is_refused_before_the_function(request_of: object, answer: str) -> None:
    with pytest.raises(Refused, match=answer):
        GATEWAY.admit(request_of(), BASE)  # type: ignore[operator]


def test_a_request_changed_after_it_was_signed_is_refused() -> None:
    request = Signer("AKIAOPERATOR", "s3cret", "us-east-1").sign("GET", url_of(API, "/runs/mine"))
    request.url = url_of(API, "/runs/theirs")
    with pytest.raises(Refused, match="does not match"):
        GATEWAY.admit(request, BASE)
