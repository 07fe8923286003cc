"""A third platform for the platform table's test: a loopback toy chat, its adapter, and its entry (TOYCHAT)."""
