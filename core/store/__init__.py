"""Postgres access: the pool, migrations and one store per table family."""
