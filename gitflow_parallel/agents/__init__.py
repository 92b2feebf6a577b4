"""Scripted agents used by `git parallel demo` (no network, no model)."""
