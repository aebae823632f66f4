# The two commands a newcomer needs: `make serve` and `make test`.
# Each sets up whatever is missing (system libopus, .venv, Python packages), then runs.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The Qwen3-TTS reference (qwen-tts==0.1.1) for parity tests, kept out of .venv:
# its transformers pin conflicts with ours.
REF_STAMP := .venv-ref/.voiceserver-ref-pins
# The Chatterbox reference (chatterbox-tts==0.1.7), likewise apart.
CBX_REF_STAMP := .venv-ref-chatterbox/.voiceserver-ref-pins
# The Fish Speech reference (fish-speech==0.1.0), likewise apart.
FISH_REF_STAMP := .venv-ref-fish/.voiceserver-ref-pins
# The VoXtream2 reference (voxtream==0.2.5), likewise apart.
VOX_REF_STAMP := .venv-ref-voxtream/.voiceserver-ref-pins
# The VoxCPM2 reference (voxcpm==2.0.3), likewise apart.
VCPM_REF_STAMP := .venv-ref-voxcpm/.voiceserver-ref-pins
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
HOST ?= 127.0.0.1
PORT ?= 8000
# torch: the pinned CPU build where no GPU is present (nothing downloads gigabytes).
TORCH := torch==2.13.0

# The browser SDK's tools (clients/js, npm) and Debian's chromium for its browser tests.
JS_DIR := clients/js
JS_STAMP := $(JS_DIR)/node_modules/.voiceserver-installed

.PHONY: serve test setup system-deps test-deps lint bench clean

serve: setup
	$(VENV)/bin/voiceserver serve --host $(HOST) --port $(PORT)

test: setup test-deps $(REF_STAMP) $(CBX_REF_STAMP) $(FISH_REF_STAMP) $(VOX_REF_STAMP) $(VCPM_REF_STAMP) $(JS_STAMP)
	cd $(JS_DIR) && npm run --silent check && npm test --silent
	$(PY) -m pytest -q

setup: system-deps $(STAMP)

system-deps:
	@$(PYTHON) -c "import ctypes.util, sys; sys.exit(0 if ctypes.util.find_library('opus') else 1)" \
		|| ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q libopus0)
	@command -v espeak-ng >/dev/null || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q espeak-ng)

# Node/npm for the SDK's build and tests; Debian's chromium for the browser tests
# (playwright-core drives it: no browser download).
# Only what is missing: NodeSource's nodejs carries npm and conflicts with Debian's.
test-deps:
	@missing=""; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	[ -z "$$missing" ] || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $$missing)

$(JS_STAMP): $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && npm ci --no-audit --no-fund
	touch $(JS_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

$(REF_STAMP): tools/ref/make_venv.sh
	bash tools/ref/make_venv.sh

$(CBX_REF_STAMP): tools/ref/chatterbox/make_venv.sh
	bash tools/ref/chatterbox/make_venv.sh

$(FISH_REF_STAMP): tools/ref/fish_speech/make_venv.sh
	bash tools/ref/fish_speech/make_venv.sh

$(VOX_REF_STAMP): tools/ref/voxtream/make_venv.sh
	bash tools/ref/voxtream/make_venv.sh

$(VCPM_REF_STAMP): tools/ref/voxcpm/make_venv.sh
	bash tools/ref/voxcpm/make_venv.sh

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: setup
	$(PY) -m bench.loadgen --concurrency 1 4 16

clean:
	rm -rf $(VENV) .venv-ref .venv-ref-chatterbox .venv-ref-fish .venv-ref-voxtream .venv-ref-voxcpm $(JS_DIR)/node_modules
