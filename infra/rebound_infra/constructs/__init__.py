"""The stack's parts, one construct each: messaging, state, scheduling, functions, events, ops API,
observability. Every resource is built from ``rebound.resources.SPEC``."""
