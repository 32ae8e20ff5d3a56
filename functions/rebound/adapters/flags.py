"""Reading the feature flags (``rebound.domain.flags``) from AWS AppConfig, with Powertools' feature
flags utility, and what happens when they cannot be read.

- The store is Powertools' ``AppConfigStore`` (an AppConfigData configuration session), its
  reads kept ``MAX_AGE_S`` seconds (``ClockedStore``): a flag changed with ``rebound flags set`` (a
  new hosted version, deployed at once) takes effect within a minute, without a deploy. The local
  cloud serves the same calls (``rebound_local.motopatch.appconfig_service``).
- A read that fails (AppConfig unreachable, a document that is not valid JSON or not the
  feature-flags form) never stops the loop: each flag keeps its last known value, else its default,
  and the failure is counted (``task.flags.read_failure_total``) and logged with the values used.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.feature_flags import FeatureFlags
from aws_lambda_powertools.utilities.feature_flags.base import StoreProvider
from aws_lambda_powertools.utilities.feature_flags.exceptions import ConfigurationStoreError
from botocore.exceptions import BotoCoreError, ClientError

from rebound.domain.errors import OperationalError
from rebound.domain.flags import DEFAULTS, flag_values, flags_document
from rebound.engine.ports import Metrics

log = logging.getLogger(__name__)

MAX_AGE_S = 30
"""How long a read of the flags is kept before AppConfig is asked again."""
FLAG_READ_FAILURE = "task.flags.read_failure_total"


class ReadInProgress(ConfigurationStoreError):
    """Nothing read yet, and another thread is reading: not a failure."""


class ClockedStore(StoreProvider):
    """A store (Powertools' ``AppConfigStore``, asked anew at each read) whose reads are kept
    ``max_age`` seconds of Rebound's clock, so the local runtime's clock governs how soon a change
    is seen as AWS's does. Readers never wait for one another: while one thread asks AppConfig,
    another is answered with the read kept (an AWS call may wait on the local cloud's clock, and a
    thread blocked on a lock would stop that clock); a reader with nothing kept yet is told so
    (``ReadInProgress``: its flags are their last known values, else their defaults, for now)."""

    def __init__(
        self,
        store: StoreProvider,
        max_age: float = MAX_AGE_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.max_age = max_age
        self.monotonic = monotonic
        self._cached: tuple[float, dict[str, Any]] | None = None
        self._reading = threading.Lock()

    @property
    def get_raw_configuration(self) -> dict[str, Any]:
        now = self.monotonic()
        cached = self._cached
        if cached is not None and now - cached[0] < self.max_age:
            return cached[1]
        if not self._reading.acquire(blocking=False):
            if cached is not None:
                return cached[1]
            raise ReadInProgress("the flags' first read is under way")
        try:
            document = self._checked(self.store.get_raw_configuration)
            self._cached = (now, document)
            return document
        finally:
            self._reading.release()

    @staticmethod
    def _checked(document: Any) -> dict[str, Any]:
        if not isinstance(document, dict):
            raise ConfigurationStoreError("the flags' document is not a JSON object")
        return document

    def get_configuration(self) -> dict[str, Any]:
        return self.get_raw_configuration

    def forget(self) -> None:
        """Ask AppConfig at the next read."""
        self._cached = None


class FlagAdmin:
    """Reading the flags as handlers see them and publishing new values (``rebound flags``): a new
    hosted configuration version of the profile, then its deployment to the environment with the
    stack's immediate strategy. ``fresh`` builds a store that reads now."""

    def __init__(
        self,
        client: Any,
        application: str,
        profile: str,
        environment: str,
        strategy: str,
        fresh: Callable[[], StoreProvider],
    ) -> None:
        self.client = client
        self.application = application
        self.profile = profile
        self.environment = environment
        self.strategy = strategy
        self.fresh = fresh

    def values(self) -> dict[str, bool]:
        try:
            return flag_values(self.fresh().get_configuration())
        except Exception as exc:
            raise OperationalError(f"read the feature flags: {type(exc).__name__}: {exc}") from exc

    def publish(self, values: dict[str, bool]) -> int:
        """Store ``values`` as a new version (and deploy it, on AWS); returns the version."""
        try:
            version = int(
                self.client.create_hosted_configuration_version(
                    ApplicationId=self.application,
                    ConfigurationProfileId=self.profile,
                    Content=json.dumps(flags_document(values)).encode(),
                    ContentType="application/json",
                )["VersionNumber"]
            )
            self.client.start_deployment(
                ApplicationId=self.application,
                EnvironmentId=self.environment,
                DeploymentStrategyId=self.strategy,
                ConfigurationProfileId=self.profile,
                ConfigurationVersion=str(version),
                Description="rebound flags set",
            )
        except (ClientError, BotoCoreError) as exc:
            raise OperationalError(f"publish the feature flags: {type(exc).__name__}: {exc}") from exc
        return version


class FlagReader:
    """``enabled(name)`` for the engine (``rebound.engine.ports.Flags``), with the fallback above."""

    def __init__(self, store: StoreProvider, metrics: Metrics, admin: FlagAdmin | None = None) -> None:
        self.features = FeatureFlags(store=store)
        self.metrics = metrics
        self.admin = admin
        """What ``rebound flags`` reads and writes the flags with."""
        self._known: dict[str, bool] = {}
        self._checked: Any = None
        """The store's document the values below were evaluated from."""
        self._values: dict[str, bool] = {}

    def forget(self) -> None:
        """Read the flags anew at the next question (``rebound flags set`` changed them here)."""
        forget = getattr(self.features.store, "forget", None)
        if forget is not None:
            forget()

    def enabled(self, name: str) -> bool:
        try:
            document = self.features.store.get_configuration()  # kept MAX_AGE_S by the store
            if document is not self._checked:
                # A new document: checked against the feature-flags schema (raises) and every flag
                # evaluated once; until the next one, a question is a lookup.
                self.features.get_configuration()
                self._values = {
                    flag: bool(self.features.evaluate(name=flag, default=DEFAULTS[flag])) for flag in DEFAULTS
                }
                self._checked = document
        except Exception as exc:
            known = self._known.get(name, DEFAULTS[name])
            if isinstance(exc, ReadInProgress) or isinstance(exc.__cause__, ReadInProgress):
                return known  # the first read is under way in another thread
            self.metrics.count(FLAG_READ_FAILURE)
            log.warning(
                "feature flags unreadable: using the last known value, else the default",
                extra={
                    "flag": name,
                    "value": known,
                    "from": "last known" if name in self._known else "default",
                    "error": f"{type(exc).__name__}: {exc}"[:300],
                },
            )
            return known
        self._known.update(self._values)
        return self._values[name]
