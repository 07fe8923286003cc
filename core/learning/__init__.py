"""Learning from the team's channels: chosen Slack and Discord channels indexed as sources, kept current from live events."""
