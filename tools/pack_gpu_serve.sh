#!/usr/bin/env bash
# Pack what `facebridge serve` needs on the H200 machine that its image lacks (docs/reference: serving.md), as two
# parts that each fit one device call beside the working tree (64 MiB a call):
#   ray[serve] 2.60 and the part of its closure the image has not, trimmed of Java (ray/jars), the dashboard's
#   client build and the py-spy binary; grpcio 1.85.1 (Serve fails on the image's 1.84.0); grpcio-health-checking
#   and grpcio-reflection 1.81.1 and protobuf 6.33.5 (the bridge's gRPC stack; bridge/grpc/gen needs >= 6.33.5).
# cp312 manylinux wheels installed with pip --target, packed as tar.xz, split into OUT/part-aa/ and OUT/part-ab/.
#
#   bash tools/pack_gpu_serve.sh [OUT=.gpuserve]      # here (network to PyPI), then see tools/gpu_serve_bench.sh
set -euo pipefail
OUT=$(realpath -m "${1:-.gpuserve}")  # absolute: the script changes directory
PY=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/gpuserve-XXXX)
trap 'rm -rf "$WORK"' EXIT
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}")
WANTED=("ray[serve]==2.60.0" "grpcio==1.85.1" "grpcio-health-checking==1.81.1" "grpcio-reflection==1.81.1"
        "protobuf==6.33.5" "packaging>=24,<26")
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
echo "carry $OUT/part-aa in the first device call and $OUT/part-ab in the second (tools/gpu_serve_bench.sh)"
