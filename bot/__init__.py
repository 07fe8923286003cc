"""Composition root: the CLI, wiring of settings, database, engine and adapters, scheduled jobs."""
