"""The container image test (`make image-test`): builds the Dockerfile with podman and runs it; not part of pytest."""
