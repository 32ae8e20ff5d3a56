"""Loading and validating YAML configuration: retry policies and task files.

Every error names the file, the key path (``tasks[2].schedule.cron``) and what was wrong.
"""

from rebound.config.loader import (
    PolicyBook,
    load_policy_book,
    load_task_file,
    load_yaml,
    parse_task_file,
    resolve_policy,
)

__all__ = [
    "PolicyBook",
    "load_policy_book",
    "load_task_file",
    "load_yaml",
    "parse_task_file",
    "resolve_policy",
]
