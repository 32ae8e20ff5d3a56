"""Patch 20, AppConfig's deployments and AppConfigData: what moto lacks of the feature flags' path.

moto keeps AppConfig applications, configuration profiles and hosted configuration versions, but
has no environments, deployment strategies or deployments, and no AppConfigData (the service that
hands a deployed configuration to the code that reads it). The feature flags
(``rebound.adapters.flags``) use all of them, through the same calls on AWS and here:

- ``CreateEnvironment``, ``GetEnvironment``, ``CreateDeploymentStrategy``: kept as given.
- ``StartDeployment``: completes at once (the stack's strategy deploys at once on AWS too); the
  environment then serves that version of that profile.
- ``StartConfigurationSession`` and ``GetLatestConfiguration``: a session names an application,
  an environment and a profile (by id or by name, as on AWS); each read answers the version last
  deployed to that environment, or an empty body when the session already has it, with the next
  poll's token. Nothing deployed yet: ``BadRequestException``, as AWS answers.

Tokens stay valid after use (AWS takes each once): the local runtime shares one reader between
threads. A token is ``<application>/<environment>/<profile>/<n>`` in URL-safe base64, which the
rehearsal's IAM check (``rehearse/calls.py``) reads to name the configuration a read is of.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

from rebound_local.motopatch.lock import LOCK

_serial = itertools.count(1)


@dataclass
class _Environment:
    id: str
    application_id: str
    name: str
    description: str = ""
    deployed: dict[str, int] = field(default_factory=dict)
    """Profile id -> the version deployed to this environment."""
    deployments: int = 0


@dataclass
class _State:
    environments: dict[str, _Environment] = field(default_factory=dict)
    strategies: dict[str, dict[str, Any]] = field(default_factory=dict)
    sessions: dict[str, int] = field(default_factory=dict)
    """Token -> the version that session last received (0: none)."""


def _region(headers: dict[str, Any]) -> str:
    found = re.search(r"Credential=[^/]+/\d+/([^/]+)/", str(headers.get("Authorization", "")))
    return found.group(1) if found else "us-east-1"


def _backend(headers: dict[str, Any]) -> tuple[Any, _State]:
    from moto.appconfig.models import appconfig_backends
    from moto.core.models import DEFAULT_ACCOUNT_ID

    backend = appconfig_backends[DEFAULT_ACCOUNT_ID][_region(headers)]
    # Kept on the backend, so a reset of moto's state resets this too.
    state = backend.__dict__.setdefault("_rebound_deployments", _State())
    return backend, state


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, str], str]:
    return (
        status,
        {"x-amzn-ErrorType": code, "Content-Type": "application/json"},
        json.dumps({"Message": message}),
    )


def _json(status: int, body: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    return status, {"Content-Type": "application/json"}, json.dumps(body)


def _body(request: Any) -> dict[str, Any]:
    data = request.get_data() if hasattr(request, "get_data") else request.data
    parsed = json.loads(data or b"{}")
    return parsed if isinstance(parsed, dict) else {}


def _new_id() -> str:
    return format(next(_serial) * 2654435761 % (1 << 28), "07x")


def _application(backend: Any, identifier: str) -> Any:
    app = backend.applications.get(identifier)
    if app is None:
        app = next((a for a in backend.applications.values() if a.name == identifier), None)
    return app


def _environment(state: _State, app_id: str, identifier: str) -> _Environment | None:
    for env in state.environments.values():
        if env.application_id == app_id and identifier in (env.id, env.name):
            return env
    return None


def _profile(app: Any, identifier: str) -> Any:
    profile = app.config_profiles.get(identifier)
    if profile is None:
        profile = next((p for p in app.config_profiles.values() if p.name == identifier), None)
    return profile


def _environment_json(env: _Environment) -> dict[str, Any]:
    return {
        "ApplicationId": env.application_id,
        "Id": env.id,
        "Name": env.name,
        "Description": env.description,
        "State": "ReadyForDeployment",
        "Monitors": [],
    }


def environments(request: Any, full_url: str, headers: dict[str, Any]) -> Any:
    """``CreateEnvironment`` (POST) and ``ListEnvironments`` (GET) of an application."""
    app_id = urlparse(full_url).path.strip("/").split("/")[1]
    with LOCK:
        backend, state = _backend(headers)
        if app_id not in backend.applications:
            return _error(404, "ResourceNotFoundException", f"Application {app_id} not found")
        if request.method == "GET":
            items = [_environment_json(e) for e in state.environments.values() if e.application_id == app_id]
            return _json(200, {"Items": items})
        body = _body(request)
        env = _Environment(_new_id(), app_id, str(body["Name"]), str(body.get("Description") or ""))
        state.environments[env.id] = env
        return _json(201, _environment_json(env))


def environment(request: Any, full_url: str, headers: dict[str, Any]) -> Any:
    """``GetEnvironment``."""
    _, app_id, _, env_id = urlparse(full_url).path.strip("/").split("/")[:4]
    with LOCK:
        _, state = _backend(headers)
        env = state.environments.get(env_id)
        if env is None or env.application_id != app_id:
            return _error(404, "ResourceNotFoundException", f"Environment {env_id} not found")
        return _json(200, _environment_json(env))


def strategies(request: Any, full_url: str, headers: dict[str, Any]) -> Any:
    """``CreateDeploymentStrategy``."""
    with LOCK:
        _, state = _backend(headers)
        body = _body(request)
        strategy: dict[str, Any] = {
            "Id": _new_id(),
            "Name": str(body["Name"]),
            "DeploymentDurationInMinutes": int(body.get("DeploymentDurationInMinutes", 0)),
            "GrowthFactor": float(body.get("GrowthFactor", 100)),
            "FinalBakeTimeInMinutes": int(body.get("FinalBakeTimeInMinutes", 0)),
            "ReplicateTo": str(body.get("ReplicateTo", "NONE")),
        }
        state.strategies[str(strategy["Id"])] = strategy
        return _json(201, strategy)


def deployments(request: Any, full_url: str, headers: dict[str, Any]) -> Any:
    """``StartDeployment``: the version is the environment's at once."""
    _, app_id, _, env_id = urlparse(full_url).path.strip("/").split("/")[:4]
    with LOCK:
        backend, state = _backend(headers)
        body = _body(request)
        env = state.environments.get(env_id)
        app = backend.applications.get(app_id)
        if env is None or app is None or env.application_id != app_id:
            return _error(404, "ResourceNotFoundException", f"Environment {env_id} not found")
        profile = app.config_profiles.get(str(body.get("ConfigurationProfileId")))
        if profile is None:
            return _error(404, "ResourceNotFoundException", "Configuration profile not found")
        strategy = state.strategies.get(str(body.get("DeploymentStrategyId")))
        if strategy is None:
            return _error(404, "ResourceNotFoundException", "Deployment strategy not found")
        try:
            version = int(str(body.get("ConfigurationVersion")))
        except (TypeError, ValueError):
            return _error(400, "BadRequestException", "ConfigurationVersion is not a version number")
        if version not in profile.config_versions:
            return _error(
                404, "ResourceNotFoundException", f"Hosted configuration version {version} not found"
            )
        env.deployed[profile.id] = version
        env.deployments += 1
        return _json(
            201,
            {
                "ApplicationId": app_id,
                "EnvironmentId": env.id,
                "DeploymentStrategyId": strategy["Id"],
                "ConfigurationProfileId": profile.id,
                "DeploymentNumber": env.deployments,
                "ConfigurationName": profile.name,
                "ConfigurationVersion": str(version),
                "Description": str(body.get("Description") or ""),
                "State": "COMPLETE",
                "PercentageComplete": 100.0,
            },
        )


def _token(app_id: str, env_id: str, profile_id: str) -> str:
    raw = f"{app_id}/{env_id}/{profile_id}/{next(_serial)}"
    return base64.urlsafe_b64encode(raw.encode()).decode()


def session_of(token: str) -> tuple[str, str, str] | None:
    """The (application, environment, profile) ids a token of this stand-in reads."""
    try:
        app_id, env_id, profile_id, _ = base64.urlsafe_b64decode(token.encode()).decode().split("/")
    except (ValueError, UnicodeDecodeError):
        return None
    return app_id, env_id, profile_id


def sessions(request: Any, full_url: str, headers: dict[str, Any]) -> Any:
    """``StartConfigurationSession``."""
    with LOCK:
        backend, state = _backend(headers)
        body = _body(request)
        app = _application(backend, str(body.get("ApplicationIdentifier", "")))
        if app is None:
            return _error(404, "ResourceNotFoundException", "Application not found")
        env = _environment(state, app.id, str(body.get("EnvironmentIdentifier", "")))
        profile = _profile(app, str(body.get("ConfigurationProfileIdentifier", "")))
        if env is None or profile is None:
            return _error(404, "ResourceNotFoundException", "Environment or configuration profile not found")
        token = _token(app.id, env.id, profile.id)
        state.sessions[token] = 0
        return _json(201, {"InitialConfigurationToken": token})


def configuration(request: Any, full_url: str, headers: dict[str, Any]) -> Any:
    """``GetLatestConfiguration``: the deployed version, or nothing if the session has it."""
    token = (parse_qs(urlparse(full_url).query).get("configuration_token") or [""])[0]
    with LOCK:
        backend, state = _backend(headers)
        read = session_of(token)
        if token not in state.sessions or read is None:
            return _error(400, "BadRequestException", "Invalid or expired configuration token")
        app_id, env_id, profile_id = read
        env = state.environments[env_id]
        version = env.deployed.get(profile_id)
        if version is None:
            return _error(400, "BadRequestException", "No configuration is deployed to this environment")
        profile = backend.applications[app_id].config_profiles[profile_id]
        hosted = profile.config_versions[version]
        following = _token(app_id, env_id, profile_id)
        state.sessions[following] = version
        content: Any = b"" if state.sessions[token] == version else hosted.content
        if isinstance(content, str):
            content = content.encode()
        return (
            200,
            {
                "Content-Type": hosted.content_type or "application/octet-stream",
                "Next-Poll-Configuration-Token": following,
                "Next-Poll-Interval-In-Seconds": "60",
                "Version-Label": str(version),
            },
            content,
        )


def _patch_appconfig_service() -> None:
    from moto import backend_index
    from moto.appconfig import urls

    # AppConfigData's host, served by moto's AppConfig (in-process mocks find a backend by host;
    # the server by the signing name, "appconfig" for both).
    data_host = r"https?://appconfigdata\.(.+)\.amazonaws\.com"
    urls.url_bases.append(data_host)
    backend_index.backend_url_patterns.append(("appconfig", re.compile(data_host)))

    urls.url_paths.update(
        {
            "{0}/applications/(?P<app_id>[^/]+)/environments$": environments,
            "{0}/applications/(?P<app_id>[^/]+)/environments/(?P<env_id>[^/]+)$": environment,
            "{0}/applications/(?P<app_id>[^/]+)/environments/(?P<env_id>[^/]+)/deployments$": deployments,
            "{0}/deploymentstrategies$": strategies,
            "{0}/configurationsessions$": sessions,
            "{0}/configuration$": configuration,
        }
    )
