"""Lambda entry points. Each parses its event, calls the engine, and shapes the response."""
