"""The domain core: pure Python and pydantic, no AWS imports."""
