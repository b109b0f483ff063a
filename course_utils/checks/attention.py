"""Checkers for notebook (placeholder, being written)."""

__all__: list[str] = []
