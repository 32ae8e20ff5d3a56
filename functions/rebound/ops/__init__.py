"""The operations layer: what operators can do, shared by the CLI and the ops API."""
