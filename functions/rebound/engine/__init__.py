"""The use cases: execute an attempt, decide a retry, escalate a dead letter, sweep. No Lambda events here."""
