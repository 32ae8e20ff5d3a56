"""The operator CLI: `rebound`."""
