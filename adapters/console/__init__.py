"""Terminal chat on the engine, for trying relaybot without a platform."""
