"""The operator command groups; each is a thin shell over ``rebound.ops``."""
