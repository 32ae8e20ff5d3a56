"""The operations layer: what operators can do, shared by the CLI and the ops API.

Plain use cases over the engine's ``Deps``: no click, no printing. Each raises Rebound errors
(``rebound.domain.errors``) and returns dataclasses with an ``as_dict()`` that is the JSON both
surfaces show, or pydantic models (``health``, ``notifications``) a route can take and return as
they are; ``common.validated`` turns a request model's errors into one ``ValidationFailed`` that
names each field. Every change goes through the run state machine and a ``UnitOfWork``, with the
caller's identity as the actor of its audit record.

- ``tasks``: plan and apply task files (paced, with backoff), list, show, pause, resume, preview.
- ``runs``: find runs, one correlated timeline, retry, skip, cancel, retry-failed.
- ``dlq``: list, show, redrive (filtered, dry-run, rate-limited, exactly once), archive.
- ``workorders``, ``policies``, ``audit``.
- ``health``: the retry health report (its query, thresholds and report models in ``health_report``).
- ``notifications``: the delivery-retry plan for failed work-order notifications, and carrying it out.
- Helpers: ``replay`` (fresh budgets), ``preview`` (fire times and DST), ``throttle`` (rate limit,
  backoff), ``queue_batches`` (SQS batch calls), ``archive`` (the DLQ archive table).
"""
