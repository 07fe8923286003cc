"""The fuzz bench's parts: seeded hostile inputs, the scripted model, and the canary and gauges it reads."""
