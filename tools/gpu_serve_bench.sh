#!/usr/bin/env bash
# `facebridge serve` on the H200 machine: the GPU tests of the serving path, then `facebridge bench serve` over
# real gRPC with JPEG decoded by nvJPEG and the full FaceFrame per stream. Made for two device calls back to back
# (the packed Ray set does not fit one call beside the working tree; tools/pack_gpu_serve.sh makes it here):
#
#   call 1, carry [".gpuserve/part-aa"]:  bash tools/gpu_serve_bench.sh stage .gpuserve/part-aa
#   call 2, carry [".gpuserve/part-ab"]:  bash tools/gpu_serve_bench.sh run .gpuserve/part-ab
#   (optional) call 3, no carry, while warm: bash tools/gpu_serve_bench.sh ray
#   issue 20, on nvidia-h200-x2 (calls 1 and 2 there first): bash tools/gpu_serve_bench.sh two-gpu
#
# `run` takes about 8 minutes: unpack (5 s), the GPU tests of tests/serving/test_gpu.py (about 2 min with the
# compiles, cached for what follows), then one server process (torch-cuda runners) at STREAMS (default 64,256,1024) for SECONDS (30)
# each. `ray` repeats the bench on RAY_REPLICAS (4) Ray Serve replicas sharing the GPU (0.25 each: four processes
# of host work) behind direct per-replica ports. Everything lands in $OUT (JSON, logs).
set -uo pipefail
MODE=${1:?stage DIR | run DIR | ray}
OUT=${OUT:-/tmp/out}
STREAMS=${STREAMS:-64,256,1024}
SECONDS_PER_COUNT=${SECONDS:-30}
mkdir -p /tmp/stage "$OUT"

unpack() {
  if [ ! -d /tmp/site/ray ]; then
    cat /tmp/stage/site.tar.xz.part-* > /tmp/site.tar.xz && mkdir -p /tmp/site && tar -xJf /tmp/site.tar.xz -C /tmp/site \
      || { echo "unpack failed: stage part-aa first, in a call just before this one"; exit 2; }
  fi
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
  python3 -c "import ray, ray.serve, grpc, grpc_health, grpc_reflection, torchvision, google.protobuf as p; \
print('ray', ray.__version__, 'grpc', grpc.__version__, 'protobuf', p.__version__, 'torchvision', torchvision.__version__)" \
    || exit 3
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
  nproc | tee "$OUT/nproc.txt"
}

case "$MODE" in
  stage)
    cp "${2:?DIR}"/* /tmp/stage/ && ls -la /tmp/stage ;;
  run)
    cp "${2:?DIR}"/* /tmp/stage/
    unpack
    timeout 200 python3 -m pytest -q -m gpu -k "serve or nvjpeg or face_service or captured_tracked_pass" \
      tests/serving/test_gpu.py 2>&1 | tail -25 | tee "$OUT/gpu-tests.txt"
    timeout 330 python3 -m bridge.cli bench serve --runners torch-cuda --streams "$STREAMS" \
      --seconds "$SECONDS_PER_COUNT" --client-processes 6 --json "$OUT/serve-h200-1proc.json" 2>&1 \
      | grep -v " INFO " | tail -40 | tee "$OUT/serve-h200-1proc.log" ;;
  ray)
    unpack
    timeout 480 python3 -m bridge.cli bench serve --runners torch-cuda --ray-replicas "${RAY_REPLICAS:-4}" \
      --ray-gpus-per-replica "${RAY_GPU_SHARE:-0.25}" --streams "${RAY_STREAMS:-256,512,1024}" \
      --seconds "$SECONDS_PER_COUNT" --client-processes 6 --json "$OUT/serve-h200-ray.json" 2>&1 \
      | grep -v " INFO " | tail -40 | tee "$OUT/serve-h200-ray.log" ;;
  two-gpu)  # the same build on one GPU, then two (one replica each), then two with a replica killed mid-run
    unpack
    N1=${N1:-256}; N2=${N2:-512}
    for run in "1 $N1 one" "2 $N2 two" "2 $N2 two-kill"; do
      set -- $run
      extra=(); [ "$3" = two-kill ] && extra=(--kill-replica-at 15)
      timeout 200 python3 -m bridge.cli bench serve --runners torch-cuda --ray-replicas "$1" \
        --ray-gpus-per-replica 1 --streams "$2" --seconds "$SECONDS_PER_COUNT" --client-processes 8 \
        "${extra[@]}" --json "$OUT/serve-h200x2-$3.json" 2>&1 | grep -v " INFO " | tail -15 | tee "$OUT/serve-h200x2-$3.log"
    done ;;
  *) echo "unknown mode $MODE: stage DIR | run DIR | ray | two-gpu"; exit 2 ;;
esac
