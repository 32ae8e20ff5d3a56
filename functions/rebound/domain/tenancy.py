"""Tenants: how a task's key carries its tenant, and which secrets a tenant's tasks may name.

A task file gives a short id (``nightly``) and a tenant (``acme``); the task's key, the id every
other part of Rebound stores and passes around, is ``<tenant>.<id>`` (``acme.nightly``). Neither
a tenant nor a short id may contain ``.``, so a key splits back unambiguously, and two tenants'
``nightly`` are two tasks. Run ids start with the task's key, so they carry the tenant too.

The loader qualifies (``rebound.domain.task.TaskFile``): it is the one place a short id becomes
a key. Everything else treats a task id as opaque. Keys written before tenancy existed have no
tenant part; ``rebound migrate tenancy`` rewrites them.

Secrets are per tenant as well: a task of tenant ``acme`` may name only references under
``/rebound/<environment>/tenants/acme/`` (an SSM parameter name or a Secrets Manager secret
name, with or without its ARN).
"""

from __future__ import annotations

SEPARATOR = "."
ALL_TENANTS = "*"
"""In a list of an identity's tenants: every tenant (an administrator)."""


def qualify(tenant: str, task_id: str) -> str:
    """The key of task ``task_id`` of ``tenant``; a key that is qualified already is returned as is."""
    if SEPARATOR in task_id:
        return task_id
    return f"{tenant}{SEPARATOR}{task_id}"


def tenant_of(task_id: str) -> str | None:
    """The tenant a task key names, or ``None`` for a key written before tenancy (no tenant part)."""
    tenant, sep, _ = task_id.partition(SEPARATOR)
    return tenant if sep else None


def short_id(task_id: str) -> str:
    """The id as the task file writes it: the key without its tenant."""
    return task_id.rpartition(SEPARATOR)[2]


def tenant_of_run(run_id: str) -> str | None:
    """The tenant a run id names (run ids start with their task's key and a ``:``)."""
    return tenant_of(run_id.partition(":")[0])


def secret_root(environment: str, tenant: str) -> str:
    """Where ``tenant``'s secrets live: ``/rebound/<environment>/tenants/<tenant>/``."""
    return f"/rebound/{environment}/tenants/{tenant}/"


def secret_path(reference: str) -> str:
    """The name a secret reference points at, as a path: ``ssm:/a/b``, ``/a/b`` and an SSM
    parameter ARN give ``/a/b``; ``secretsmanager:a/b`` and a Secrets Manager ARN give ``/a/b``
    (the secret's name, without the random suffix an ARN may carry after its last ``-``)."""
    ref = reference.strip()
    if ref.startswith("ssm:"):
        return ref[len("ssm:") :]
    if ref.startswith("secretsmanager:"):
        return "/" + ref[len("secretsmanager:") :].lstrip("/")
    if ref.startswith("arn:"):
        parts = ref.split(":", 6)
        resource = parts[6] if len(parts) == 7 else parts[-1]
        if parts[2:3] == ["ssm"]:
            return "/" + resource.removeprefix("parameter").lstrip("/")
        if parts[2:3] == ["secretsmanager"]:
            name = resource.removeprefix("secret:")
            return "/" + name.lstrip("/")
    return ref


def secret_problem(reference: str, environment: str, tenant: str) -> str | None:
    """Why a task of ``tenant`` may not name ``reference``, or ``None`` when it may."""
    root = secret_root(environment, tenant)
    path = secret_path(reference)
    if path.startswith(root) and ".." not in path.split("/"):
        return None
    return (
        f"secret {reference!r} is outside tenant {tenant!r}'s secrets: a task of {tenant} may name "
        f"only references under {root} (ssm:{root}NAME or secretsmanager:{root.lstrip('/')}NAME)"
    )
