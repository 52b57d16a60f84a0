#!/bin/sh
# `facebridge bench swap` on the H200 machine (no network there): the live model swap on ONNX Runtime's CPU provider
# (16 quiet cores) and its CUDA execution provider. The wheels the image lacks arrive beforehand in /tmp/stage
# (docs/PERFORMANCE.md, "Live model swap", says how they were carried): onnxruntime-gpu as xz parts
# ort-part-a?, the bridge's small pure dependencies as wheels. Writes $OUT/swap-h200.json and $OUT/devices.txt.
set -eu
STAGE=${STAGE:-/tmp/stage}
SITE=${SITE:-/tmp/site}
OUT=${OUT:-/tmp/out}
PY=${PY:-python3}
ORT_WHEEL=onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl
ORT_SHA256=05d548956197b9d01f59b625de740e0d6be3593f874e241a12dc0362650ecdf7
mkdir -p "$OUT" "$SITE"

if ls "$STAGE"/part-a? >/dev/null 2>&1; then
  cat "$STAGE"/part-a? | xz -d -T0 > "$STAGE/$ORT_WHEEL"
  echo "$ORT_SHA256  $STAGE/$ORT_WHEEL" | sha256sum -c -
fi
. "$(dirname "$0")/gpu_wheels.sh"  # install_wheels DIR [SITE]
export PYTHONPATH="$(pwd)"
if ls "$STAGE"/*.whl >/dev/null 2>&1; then install_wheels "$STAGE" "$SITE"; fi
export FACEBRIDGE_HOME=/tmp/fb-home FACEBRIDGE_ENGINE_CACHE=/tmp/fb-engines
"$PY" -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())" | tee "$OUT/devices.txt"
"$PY" -m bridge devices 2>&1 | tee -a "$OUT/devices.txt"
nproc | sed 's/^/cpu cores: /' | tee -a "$OUT/devices.txt"
"$PY" -m bridge bench swap --backends "${BACKENDS:-onnxruntime,onnxruntime-cuda}" --json "$OUT/swap-h200.json"
