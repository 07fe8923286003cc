# Two commands: `make run` starts the bot, `make test` runs the tests. Each builds .venv first with what
# it needs: `make run` the runtime plus only the extras the settings use, `make test` everything.
# `make install` is `make run` without starting the bot (images, first-time setup, measuring).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
INSTALL := $(PIP) install --quiet -c constraints.txt
# One stamp per part: a re-run installs only what is missing, and an edit of pyproject.toml or
# constraints.txt installs again what depends on it.
VENV_STAMP := $(VENV)/.created
RUNTIME_STAMP := $(VENV)/.installed-runtime
LOCAL_STAMP := $(VENV)/.installed-local
TEST_STAMP := $(VENV)/.installed-test
MCP_STAMP := $(VENV)/.installed-mcp
# The extras the settings need, read by core.config itself (environment first, then .env) so make and
# the bot agree. A setting the bot would refuse yields none: `relaybot run` then says which one.
NEEDED_EXTRAS = $(PY) -c 'from core.config import Settings; print("local" if Settings().embedding_provider == "local" else "")' 2>/dev/null
NEEDED_MCP = $(PY) -c 'from core.config import Settings; print("mcp" if Settings().mcp_servers else "")' 2>/dev/null

.PHONY: run install test bench clean image-test

$(VENV_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	touch $@

$(RUNTIME_STAMP): pyproject.toml constraints.txt $(VENV_STAMP)
	$(INSTALL) -e .
	touch $@

# Local embeddings: MiniLM on onnxruntime, no PyTorch.
$(LOCAL_STAMP): pyproject.toml constraints.txt $(RUNTIME_STAMP)
	@echo "EMBEDDING_PROVIDER=local: installing local embeddings (onnxruntime and MiniLM); EMBEDDING_PROVIDER=openai or none needs none of it."
	$(INSTALL) -e '.[local]'
	touch $@

# The tests run both local runtimes, so they add the PyTorch one (torch pinned in constraints.txt).
$(TEST_STAMP): pyproject.toml constraints.txt $(RUNTIME_STAMP)
	$(INSTALL) -e '.[local,local-torch,test]'
	touch $@ $(LOCAL_STAMP)

# MCP servers' tools: the mcp SDK, only when MCP_SERVERS is set.
$(MCP_STAMP): pyproject.toml constraints.txt $(RUNTIME_STAMP)
	$(INSTALL) -e '.[mcp]'
	touch $@

install: $(RUNTIME_STAMP)
	@if [ "$$($(NEEDED_EXTRAS))" = local ] && ! $(MAKE) -q $(LOCAL_STAMP); then $(MAKE) --no-print-directory $(LOCAL_STAMP); fi
	@if [ "$$($(NEEDED_MCP))" = mcp ] && ! $(MAKE) -q $(MCP_STAMP); then $(MAKE) --no-print-directory $(MCP_STAMP); fi

run: install
	$(VENV)/bin/relaybot run

test: $(TEST_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n 2 --durations=25

bench: $(TEST_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m bench.engine_overhead
	HF_HUB_OFFLINE=1 $(PY) -m bench.api_overhead
	HF_HUB_OFFLINE=1 $(PY) -m bench.slack_stream
	HF_HUB_OFFLINE=1 $(PY) -m bench.discord_stream
	HF_HUB_OFFLINE=1 $(PY) -m bench.retrieval
	HF_HUB_OFFLINE=1 $(PY) -m bench.embeddings

# The container image, really built and run: podman (installed from Debian if missing) builds the Dockerfile
# from wheels made here on a Debian base made here, then /healthz, the healthcheck and the data volume are
# checked (tests/image/image_check.py). Not part of `make test`; one "skipped:" line where podman cannot run.
image-test: $(VENV_STAMP)
	$(PY) tests/image/image_check.py

clean:
	rm -rf $(VENV)
