# Two commands: `make run` starts the bot, `make test` runs the tests. Each builds .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: run test bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt torch==2.13.0
	$(PIP) install --quiet -c constraints.txt -e '.[local,test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/relaybot run

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m bench.engine_overhead
	HF_HUB_OFFLINE=1 $(PY) -m bench.slack_stream
	HF_HUB_OFFLINE=1 $(PY) -m bench.discord_stream
	HF_HUB_OFFLINE=1 $(PY) -m bench.retrieval

clean:
	rm -rf $(VENV)
