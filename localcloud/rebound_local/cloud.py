"""The embedded AWS stand-in: moto in server mode on 127.0.0.1, in this process.

It runs in this process so that the runtime can play the parts of AWS that moto does not
(Scheduler firing, Lambda event source mappings, the stream-to-bus relay) directly against the
same backends, while any AWS client (the AWS CLI, boto3, the ``rebound`` CLI) talks to it over
HTTP at ``endpoint_url``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import boto3

from rebound_local import motopatch
from rebound_local.provision import ACCOUNT, REGION

_ACCOUNT_STREAMS = re.compile(r"^https://\d{12}\.streams-ddb\.([a-z0-9-]+)\.amazonaws\.com")
LOCAL_CREDENTIALS = {"aws_access_key_id": "rebound-local", "aws_secret_access_key": "rebound-local"}


class LocalCloud:
    def __init__(self, port: int = 0, clock: Callable[[], datetime] | None = None) -> None:
        self.port = port
        self._clock = clock
        self._server: Any = None
        self.endpoint_url = ""

    def start(self) -> str:
        # moto reads these when a backend is first touched; set them before anything else.
        os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "true")
        os.environ["MOTO_ACCOUNT_ID"] = ACCOUNT
        motopatch.install()
        motopatch.set_clock(self._clock)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log on the terminal
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.port = int(port)
        self.endpoint_url = f"http://{host}:{port}"
        return self.endpoint_url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        motopatch.set_clock(None)

    def session(self) -> boto3.session.Session:
        return boto3.session.Session(
            aws_access_key_id=LOCAL_CREDENTIALS["aws_access_key_id"],
            aws_secret_access_key=LOCAL_CREDENTIALS["aws_secret_access_key"],
            region_name=REGION,
        )

    def client(self, service: str) -> Any:
        return self.session().client(service, endpoint_url=self.endpoint_url)  # type: ignore[call-overload]

    def attach_inproc(self, session: boto3.session.Session, gate: Callable[..., Any] | None = None) -> None:
        """Route this session's clients straight into the same moto backends, without HTTP.

        Clients of this session must be created without ``endpoint_url``: moto recognises the
        regular AWS endpoints. Everything else (the lock, the clock, the backends) is shared with
        the HTTP endpoint, so both transports see one cloud.

        ``gate(event_name, request)`` may answer an attempt instead of moto (injected throttling).
        It must be asked here, before moto runs: botocore calls every ``before-send`` handler
        and keeps the first answer, so a separate handler could not stop moto from acting.
        """
        from moto.core.botocore_stubber import BotocoreStubber

        stubber = BotocoreStubber()
        stubber.enabled = True

        def send(event_name: str, request: Any, **kwargs: Any) -> Any:
            if gate is not None:
                answer = gate(event_name, request)
                if answer is not None:
                    return answer
            # botocore sends a DynamoDB Streams call naming a stream ARN to the account's own
            # endpoint, which moto's in-process routing does not know; the regional one it does.
            request.url = _ACCOUNT_STREAMS.sub(r"https://streams.dynamodb.\1.amazonaws.com", request.url)
            return stubber(event_name, request, **kwargs)

        session.events.register("before-send", send)

    # --- direct access to moto's backends, for the parts AWS plays itself --------------------
    @staticmethod
    def sqs_backend() -> Any:
        from moto.sqs.models import sqs_backends

        return region_backend(sqs_backends)

    @staticmethod
    def dynamodb_backend() -> Any:
        from moto.dynamodb.models import dynamodb_backends

        return region_backend(dynamodb_backends)

    @staticmethod
    def scheduler_backend() -> Any:
        from moto.scheduler.models import scheduler_backends

        return region_backend(scheduler_backends)

    @staticmethod
    def events_backend() -> Any:
        from moto.events.models import events_backends

        return region_backend(events_backends)

    @staticmethod
    def sns_backend() -> Any:
        from moto.sns.models import sns_backends

        return region_backend(sns_backends)


def region_backend(backends: Any) -> Any:
    """The local account's backend in the local region of one of moto's services.

    moto's own lookup (``backends[ACCOUNT][REGION]``) takes a lock and compares the service's
    backend dictionary with every other service's on each call; the parts AWS plays look a backend
    up for every message and item, so an existing one is read from the dictionaries directly."""
    account = dict.get(backends, ACCOUNT)
    backend = dict.get(account, REGION) if account is not None else None
    return backend if backend is not None else backends[ACCOUNT][REGION]


def reset_moto() -> None:
    """Forget every resource, in every service (between tests that share the process)."""
    from moto.core.base_backend import BackendDict

    with motopatch.LOCK:
        BackendDict.reset()


class LocalQueueAges:
    """The oldest message's age of each local queue, read from the queue moto keeps in this
    process (nothing is received, so nothing is hidden): the local stand-in for CloudWatch's
    ``ApproximateAgeOfOldestMessage``, which moto does not publish. Ages are seconds since
    ``SentTimestamp`` on the local runtime's clock (moto's clock is routed through it)."""

    source = "local runtime"

    def __init__(self, names: dict[str, str], now: Callable[[], datetime]) -> None:
        self.names = names
        self.now = now

    def wall_ms(self) -> float:
        return self.now().timestamp() * 1000

    def oldest_age_s(self, queue: str) -> float | None:
        found = LocalCloud.sqs_backend().queues.get(self.names[queue])
        if found is None:
            return None
        with found._messages_lock:
            sent = [m.sent_timestamp for m in found._messages if m.sent_timestamp is not None]
        return max(self.wall_ms() - min(sent), 0.0) / 1000 if sent else None
