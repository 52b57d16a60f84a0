#!/usr/bin/env bash
# What `facebridge serve` needs on the H200 machine that its image lacks, for tools/measure/gpu_serve_bench.sh
# (docs/reference: serving.md). Needs PyPI (pip download) here; the device has no network.
#
#   bash tools/measure/pack_gpu_serve.sh [wheels] [DIR=.gpuwheels]   # default: the one-call set, 7.4 MB of cp312 wheels:
#       grpcio 1.85.1, grpcio-health-checking and grpcio-reflection 1.81.1, protobuf 6.33.5 (the bridge's gRPC
#       stack: the image has grpcio 1.84 and neither health nor reflection; bridge/grpc/gen needs protobuf >= 6.33.5), timecode 1.5.1 and ntplib 0.4.0 (pure Python), soxr 1.1.0
#   bash tools/measure/pack_gpu_serve.sh ray [DIR=.gpuserve]          # Ray Serve for the `ray`/`two-gpu` modes (two calls):
#       ray[serve] 2.60 and the part of its closure the image has not, trimmed of Java (ray/jars), the dashboard's
#       client build and the py-spy binary, plus the wheels above, as tar.xz split into DIR/part-aa/ and DIR/part-ab/
#       (measured: 256 MB unpacked, 53 MB packed, two 27 MB parts)
set -euo pipefail
KIND=wheels
case "${1:-}" in wheels|ray) KIND=$1; shift ;; esac
PY=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/gpuserve-XXXX)
trap 'rm -rf "$WORK"' EXIT
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}")
GRPC_STACK=("grpcio==1.85.1" "grpcio-health-checking==1.81.1" "grpcio-reflection==1.81.1" "protobuf==6.33.5")
BRIDGE_DEPS=("soxr==1.1.0")  # the audio resampler, imported by the serve path since imports moved to the top
PURE=("timecode==1.5.1" "ntplib==0.4.0")  # pure Python (timecode is published as an sdist only: built into a wheel here)
if [ "$KIND" = wheels ]; then
  OUT=$(realpath -m "${1:-.gpuwheels}")
  mkdir -p "$OUT" && rm -f "$OUT"/*.whl
  "$PY" -m pip download -q --no-deps -d "$OUT" "${TARGET[@]}" "${GRPC_STACK[@]}" "${BRIDGE_DEPS[@]}"
  "$PY" -m pip wheel -q --no-deps -w "$OUT" "${PURE[@]}"
  du -sh "$OUT"; ls -1 "$OUT"
  echo "carry $(basename "$OUT") in the device call: bash tools/measure/gpu_serve_bench.sh"
  exit 0
fi
OUT=$(realpath -m "${1:-.gpuserve}")  # absolute: the script changes directory
WANTED=("ray[serve]==2.60.0" "${GRPC_STACK[@]}" "packaging>=24,<26")
"$PY" -m pip download -q -d "$WORK/wheels" "${TARGET[@]}" "${WANTED[@]}"

# what the H200 image already has (KINDS.md, read 2026-11-17); grpcio and protobuf are replaced on purpose
HAVE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs certifi
charset-normalizer click cloudpickle colorama filelock frozenlist fsspec h11 httpcore httpx idna jinja2 markupsafe
msgpack multidict numpy packaging pandas pillow pip prometheus-client propcache psutil pyyaml requests rich
setuptools six typing-extensions urllib3 wrapt yarl pygments markdown-it-py mdurl"
cd "$WORK/wheels"
for wheel in *.whl; do
  name=$(echo "${wheel%%-*}" | tr '[:upper:]_' '[:lower:]-')
  if [[ " $(echo $HAVE) " == *" $name "* ]]; then rm "$wheel"; fi
done
ls -1 "$WORK/wheels" > "$WORK/wheels.txt"
"$PY" -m pip install -q --no-deps --no-compile --target "$WORK/site" "${TARGET[@]}" "$WORK"/wheels/*.whl
cd "$WORK/site"
rm -rf ray/jars ray/dashboard/client/build bin/py-spy
find . -name "__pycache__" -prune -exec rm -rf {} +
cp "$WORK/wheels.txt" ./GPUSERVE_WHEELS.txt
tar -cf - . | xz -T0 -6 > "$WORK/site.tar.xz"
mkdir -p "$OUT"
rm -rf "$OUT"/part-*
split -n 2 -d -a 1 "$WORK/site.tar.xz" "$WORK/part-"
mkdir -p "$OUT/part-aa" "$OUT/part-ab"
mv "$WORK/part-0" "$OUT/part-aa/site.tar.xz.part-aa"
mv "$WORK/part-1" "$OUT/part-ab/site.tar.xz.part-ab"
du -sh "$WORK/site" "$WORK/site.tar.xz" "$OUT"/part-*
echo "carry $OUT/part-aa in the first device call and $OUT/part-ab in the second (tools/measure/gpu_serve_bench.sh)"
