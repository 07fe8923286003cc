"""The bot's HTTP server: health checks and the Slack HTTP-mode endpoint."""
