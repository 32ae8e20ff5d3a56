"""Pure prediction, no I/O: what a task file would do over the next hours (``preflight``, scored
by ``hit_rate`` against a simulation) and what a retry policy would do to a failure history
(``whatif``). The operations that read the deployment for them: ``rebound.ops.preflight`` and
``rebound.ops.policies``."""
