# `facebridge bench pipeline --against-mediapipe` on the H200 machine's host CPU (an Intel Xeon with AMX), the
# only Intel machine the device tool reaches. The image has no network and Python 3.12, so what it lacks comes
# as xz'd site folders, split to fit the 64 MiB carry (pack them with `pack`, here), one device call per part, the
# calls back to back (the machine keeps /tmp only while warm):
#   bash tools/measure/h200host_pipeline_bench.sh pack                   # here: .gpuwheels/xeon/p-*
#   bash tools/measure/h200host_pipeline_bench.sh stage .gpuwheels/xeon/p-mp    (carry .gpuwheels/serve and that part)
#   bash tools/measure/h200host_pipeline_bench.sh stage .gpuwheels/xeon/p-fb-aa
#   bash tools/measure/h200host_pipeline_bench.sh run .gpuwheels/xeon/p-fb-ab   (the last part; then the runs)
# mp: MediaPipe 0.10.21 with numpy 1.26.4 and protobuf 4.25.8 (its own path, the image's OpenCV), its unused
# models left out; fb: LiteRT 2.3.0 (its WebGPU accelerator and plugin tool left out), numba and llvmlite.
# RUNS (default "paced b2b paced b2b paced b2b"), CORE (default 3); JSONs go to $OUT as one tar.
set -u
STAGE=/tmp/stage

pack() {
  local w=/tmp/xeon-wheels pip="${PIP:-.venv/bin/pip}"
  local tags="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
    --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64"
  rm -rf $w && mkdir -p $w/mp $w/fb $w/x/mp $w/x/fb
  $pip download -q $tags -d $w/mp mediapipe==0.10.21 numpy==1.26.4 protobuf==4.25.8 attrs absl-py flatbuffers sounddevice
  $pip download -q $tags -d $w/fb ai-edge-litert==2.3.0 numba==0.68.1 llvmlite==0.50.0
  for f in $w/mp/*.whl; do unzip -q -o "$f" -d $w/x/mp; done
  for f in $w/fb/*.whl; do unzip -q -o "$f" -d $w/x/fb; done
  (cd $w/x/mp/mediapipe/modules && rm -rf hand_landmark palm_detection pose_detection pose_landmark selfie_segmentation)
  (cd $w/x/fb && rm -rf ai_edge_litert/libLiteRtWebGpuAccelerator.so ai_edge_litert/tools/apply_plugin_main \
     ai_edge_litert/vendors/google_tensor numba/tests llvmlite/tests)
  rm -rf .gpuwheels/xeon && mkdir -p .gpuwheels/xeon/p-mp
  tar -C $w/x/mp -cf - . | xz -T2 -6 > .gpuwheels/xeon/p-mp/mp.tar.xz
  tar -C $w/x/fb -cf - . | xz -T2 -6 | (cd .gpuwheels/xeon && split -b 25m - fb-)
  for p in .gpuwheels/xeon/fb-*; do mkdir -p "${p%/*}/p-${p##*/}" && mv "$p" "${p%/*}/p-${p##*/}/"; done
  du -sh .gpuwheels/xeon/*
}

stage() {
  mkdir -p $STAGE && cp "$1"/* $STAGE/ && ls -la $STAGE
  if [ -f $STAGE/mp.tar.xz ] && [ ! -d /tmp/mpsite ]; then
    mkdir -p /tmp/mpsite && xz -dc $STAGE/mp.tar.xz | tar -C /tmp/mpsite -xf - && rm $STAGE/mp.tar.xz
    # MediaPipe's drawing_utils imports matplotlib.pyplot at import time and the worker draws nothing
    python3 -c "import matplotlib.pyplot" 2>/dev/null || {
      mkdir -p /tmp/mpstub/matplotlib && touch /tmp/mpstub/matplotlib/__init__.py /tmp/mpstub/matplotlib/pyplot.py; }
    printf '#!/bin/sh\nPYTHONPATH=/tmp/mpsite:/tmp/mpstub exec python3 "$@"\n' > /tmp/mp-python && chmod +x /tmp/mp-python
    /tmp/mp-python -c "import numpy, google.protobuf, cv2, mediapipe; print('mediapipe', mediapipe.__version__,
      'numpy', numpy.__version__, 'protobuf', google.protobuf.__version__, 'cv2', cv2.__version__)"
  fi
}

run() {
  stage "$1"
  mkdir -p /tmp/fbsite && cat $STAGE/fb-* | xz -dc | tar -C /tmp/fbsite -xf - || { echo "the fb parts do not assemble"; return 4; }
  . tools/measure/gpu_wheels.sh && install_wheels .gpuwheels/serve || return 4
  export PYTHONPATH=$PWD:/tmp/fbsite:$PYTHONPATH FACEBRIDGE_HOME=/tmp/fbhome
  python3 -c "import ai_edge_litert, numba, onnxruntime; print('litert ok, numba', numba.__version__, 'ort', onnxruntime.__version__)"
  lscpu | grep -i "model name"; mkdir -p /tmp/res
  local i=0 kind
  for kind in ${RUNS:-paced b2b paced b2b paced b2b}; do
    i=$((i + 1)); echo "== run $i $kind, load $(cut -d' ' -f1-3 /proc/loadavg)"
    if [ $kind = paced ]; then set -- --frames 600 --pace 30; else set -- --frames 900; fi
    python3 -m bridge.cli bench pipeline --configs "" --core ${CORE:-3} --against-mediapipe "$@" \
      --mediapipe-python /tmp/mp-python --json /tmp/res/h200host-$kind-$i.json 2>&1 | grep -v "^[- ]*$" | tail -3
    tar -C /tmp/res -cf $OUT/res.tar .
  done
}

"$@"
