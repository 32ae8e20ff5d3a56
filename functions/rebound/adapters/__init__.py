"""boto3-backed implementations of the engine's ports. Each takes its client as a parameter."""
