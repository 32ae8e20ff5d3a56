"""Rebound: scheduled and event-triggered tasks that are retried, dead-lettered and recovered.

This package is what the Lambda functions run. Layers, from the inside out:

- ``rebound.domain``: models, the run state machine, retry policies, the audit chain. No AWS imports.
- ``rebound.engine``: the use cases (execute, decide retry, escalate, sweep), written against ports.
- ``rebound.adapters``: boto3-backed implementations of those ports; each takes its client as a parameter.
  ``rebound.adapters.targets`` is what a task runs (sim, lambda, http) behind the ``Targets`` port.
- ``rebound.ops``: the operations layer shared by the CLI and the ops API.
- ``rebound.handlers``: thin Lambda entry points.
"""

__version__ = "0.1.0"
