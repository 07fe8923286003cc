"""The HTTP API: relaybot's engine over /api/answer and the OpenAI wire format at /v1."""
