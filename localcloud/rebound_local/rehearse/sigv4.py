"""The ops API's front door as API Gateway keeps it with IAM authorization: a request must carry a
valid SigV4 signature (service ``execute-api``) by a known access key, and the identity the key
belongs to becomes the event's ``requestContext.identity``. An unsigned request, one signed with
the wrong secret, or one whose signed parts were changed is answered 403 and never reaches the
function, as on AWS.

The rehearsal signs each operator call with botocore's ``SigV4Auth``, as any AWS client would,
and lets it in through ``Gateway.admit``."""

from __future__ import annotations

import copy
import hmac
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

SERVICE = "execute-api"
AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[^,]+), "
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)


class Refused(Exception):
    """API Gateway's 403 before the function: ``message`` is what it answers."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Signer:
    """An operator's credentials, signing requests as an AWS client does."""

    access_key: str
    secret_key: str
    region: str

    def sign(self, method: str, url: str, body: Any = None) -> AWSRequest:
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        request = AWSRequest(method=method, url=url, data=data, headers=headers)
        SigV4Auth(Credentials(self.access_key, self.secret_key), SERVICE, self.region).add_auth(request)
        return request


@dataclass
class Gateway:
    """The IAM-authorized front door: ``identities`` maps an access key to its secret and the ARN
    of the identity it belongs to."""

    region: str
    identities: dict[str, tuple[str, str]] = field(default_factory=dict)

    def admit(self, request: AWSRequest, base_event: dict[str, Any]) -> dict[str, Any]:
        """The Lambda event for ``request`` once its signature checks out; raises ``Refused``."""
        headers = {k: str(v) for k, v in request.headers.items()}
        authorization = headers.get("Authorization")
        if authorization is None:
            raise Refused("Missing Authentication Token")
        match = AUTHORIZATION.match(authorization)
        if match is None or match["service"] != SERVICE or match["region"] != self.region:
            raise Refused("Authorization header requires a SigV4 signature for execute-api in this region")
        known = self.identities.get(match["key"])
        if known is None:
            raise Refused("The security token included in the request is invalid.")
        secret, arn = known
        unsigned = AWSRequest(
            method=request.method,
            url=request.url,
            data=request.data,
            headers={k: v for k, v in headers.items() if k.lower() in match["signed"].split(";")},
        )
        unsigned.context["timestamp"] = headers.get("X-Amz-Date", "")
        signer = SigV4Auth(Credentials(match["key"], secret), SERVICE, self.region)
        expected = signer.signature(
            signer.string_to_sign(unsigned, signer.canonical_request(unsigned)), unsigned
        )
        if not hmac.compare_digest(expected, match["signature"]):
            raise Refused("The request signature we calculated does not match the signature you provided.")
        return _event(request, base_event, arn, match["key"])


def _event(request: AWSRequest, base: dict[str, Any], arn: str, access_key: str) -> dict[str, Any]:
    parts = urlsplit(str(request.url))
    stage, _, rest = str(parts.path).lstrip("/").partition("/")
    path = "/" + rest  # API Gateway hands the function the path under its stage
    query = dict(parse_qsl(parts.query)) or None
    event = copy.deepcopy(base)
    body = request.data.decode() if isinstance(request.data, bytes) else request.data
    event.update(
        path=path,
        httpMethod=request.method,
        pathParameters={"proxy": path.lstrip("/")},
        queryStringParameters=query,
        multiValueQueryStringParameters={k: [v] for k, v in query.items()} if query else None,
        body=body,
    )
    event["headers"] = {**(event.get("headers") or {}), **{k: str(v) for k, v in request.headers.items()}}
    context = event["requestContext"]
    context.update(httpMethod=request.method, path=f"/{stage}{path}", stage=stage)
    context["identity"] = {**context["identity"], "userArn": arn, "caller": arn, "accessKey": access_key}
    return event


def url_of(api: str, path: str, query: dict[str, str] | None = None) -> str:
    return f"{api}{path}" + (f"?{urlencode(query)}" if query else "")
