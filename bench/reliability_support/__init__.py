"""Helpers of bench/reliability.py: a loopback Postgres, bot processes, platform drivers, scenarios and their figures."""
