#!/usr/bin/env bash
# `facebridge serve` on the H200 machine, in ONE device call (issue 17): the GPU parity tests of the serving path
# (tests/multistream/test_gpu.py), then `facebridge bench serve` over real gRPC on loopback with JPEG frames decoded
# by nvJPEG and the full FaceFrame per stream, first on one server process, then on several processes sharing
# the GPU (direct ingress, one port each, as Ray Serve replicas would be). Everything lands in $OUT (at most
# 8 files come back): env.txt, gpu-tests.txt, serve-1proc.{json,log}, serve-Nproc.{json,log}.
#
#   here, once:   bash tools/measure/pack_gpu_serve.sh            # .gpuwheels/: grpcio 1.85.1, -health-checking and
#                                                         # -reflection 1.81.1, protobuf 6.33.5 (7.4 MB, cp312)
#   device call:  carry [".gpuwheels"], timeout_s 600:   bash tools/measure/gpu_serve_bench.sh
#
# torch.compile's cache: each call leaves $OUT/inductor.tgz.part00, 01, ...; copy them to .gpucache/ here (ignored by
# git: `echo /.gpucache/ >> .git/info/exclude`) and carry [".gpuwheels", ".gpucache"]: the next call starts from it.
#
# Each step has its own time limit, so the call ends inside 10 minutes with what it measured; bench serve writes
# every stream count to its JSON's `.partial` as the count ends, so a cut-short step keeps its counts.
# Knobs (environment): STREAMS_1 (32), PROCS (6), STREAMS_N (256,1024), SECS (30 per count), CLIENTS (8),
# IN_FLIGHT (0: clients send every frame; 1: as `run --remote`), PHASES (spread: each stream's frames at its own
# point of the frame period, as independent cameras; aligned: every stream's at once, the load before 2026-12-06),
# RUNNERS (torch-cuda; cpu for a dry run anywhere), WHEELS (.gpuwheels; several folders space-separated, e.g.
# ".gpuwheels .gpunvimg" with SERVE_ARGS="--jpeg-decoder nvimgcodec"; empty: use what is installed),
# T_TESTS (180), T_ONE (120), T_MANY (200) seconds: with the kill graces and start-up, at most about 9.5 minutes.
#
# Several processes on one GPU (`procs`): PROCS (8) servers at STREAMS_N (512), once per entry of SERVE_ARGS (serve
# arguments, entries split by ';', e.g. "--cuda-wait spin;--decode-workers 4"), all under CUDA MPS when MPS=1.
#
# The host path alone (issue 17), one short call: `describe` runs `facebridge bench describe` on this machine's CPU
# (a pass of DESCRIBE_STREAMS streams described and its replies built, against one stream at a time; T_DESCRIBE 300).
#
# LOAD=1 (procs, profile): whole-host CPU (/proc/stat) and `nvidia-smi dmon` (utilisation, power, clocks; GPM SM
# activity and occupancy) sampled each second beside the bench, summarised per measured window into NAME-load.json
# by tools/measure/host_load.py (every bench log line carries the unix time it was printed).
#
# Where one serve process's CPU goes (`profile`): py-spy carried in WHEELS, PROFILE_STREAMS (128) streams, SPY_S (8)
# seconds with --gil then all threads; profile-top.txt summarised by tools/measure/pyspy_top.py (SPY: py-spy elsewhere;
# on the 2-core VM: RUNNERS=cpu WHEELS= SPY=.venv/bin/py-spy PYTHON=.venv/bin/python).
#
# The batched wire against Track (`wires`): one server (--prewarm), one `bench serve --address --wire WIRES`
# (track,many: a trial of each in turn, ROUNDS (1) times per count, many's share of track's in wire_ratios) at
# STREAMS_N (64,256), IN_FLIGHT (1), CLIENTS (4), SECS per count; wires.json.
#
# The engine process and its front ends (`fronts`, issue 43): `bench serve` starts one `facebridge serve --front-ends
# FRONT_ENDS (8) --frame-slot-kib SLOT_KIB (48: the sample's JPEGs are 25-27 kB; /dev/shm holds the rings, 8 x 125
# slots x 48 KiB = 47 MiB, and a container's /dev/shm may be 64 MiB) --updates off` (and bench's own --prewarm
# 480x360, --max-streams the largest count) and drives it over WIRES (track; "track,many": both in turn on the same
# server) at STREAMS_N (1000), SECS per count, IN_FLIGHT (1), CLIENTS (8), round-robin over the front ends'
# addresses; server_cpu_ms_per_frame sums the engine's and every front end's CPU (their pids are on the ready line).
# fronts.{json,log}; PROCS (1) such servers side by side (an engine each, FRONT_ENDS front ends each: nvJPEG decodes
# one batch at a time in a process, so the engines' decoders work in parallel), under CUDA MPS when MPS=1.
# LOAD=1 adds the host's CPU and the GPU's activity; SPY_AT="TEXT" (py-spy's wheel in WHEELS)
# profiles the engine and one front end SPY_AFTER (20) seconds after the bench log's line with TEXT, into
# fronts-spy.txt (SPY_NATIVE=1: every thread's C/C++ frames too). 1,000 streams for 60 s on both wires:
#   LOAD=1 SECS=60 WIRES=track,many bash tools/measure/gpu_serve_bench.sh fronts
# Several server configurations in one call (one machine start, the Inductor cache warm from the first): SERVE_ARGS
# entries split by ';' each start their own server in turn, T_FRONTS seconds each, into fronts-1.{json,log},
# fronts-2..., e.g. SERVE_ARGS=";--switch-interval-ms 0.5" (the default against a shorter switch interval).
# A server of 1,000 streams takes about 240 s to listen on an H100 (its `started in` line says where): give T_FRONTS
# at least 300 for one count of SECS=20. Decode processes: MPS=1 SERVE_ARGS="--decode-processes 4".
#
# Ray Serve (issue 20, several calls: its packed wheels do not fit one call beside the working tree):
#   bash tools/measure/pack_gpu_serve.sh ray, then calls `stage .gpuserve/part-aa`, `ray .gpuserve/part-ab` [RAY_REPLICAS],
#   or `two-gpu .gpuserve/part-ab` on nvidia-h200-x2.
set -uo pipefail
MODE=${1:-all}
OUT=${OUT:-/tmp/out}
PY=${PYTHON:-python3}
RUNNERS=${RUNNERS:-torch-cuda}
SECONDS_PER_COUNT=${SECS:-30}  # not $SECONDS: bash sets that to its own running time
WHEELS=${WHEELS-.gpuwheels}
mkdir -p "$OUT" /tmp/stage
export FACEBRIDGE_HOME=${FACEBRIDGE_HOME:-/tmp/fbhome} PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

# torch.compile's kernels from the last call (its $OUT/inductor.tgz.part*, put in .gpucache/ and carried), and this
# call's for the next: a cold start compiled for 190-436 s of a 600 s call
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor}
INDUCTOR_CARRY=${INDUCTOR_CARRY:-.gpucache/inductor.tgz}
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
if compgen -G "$INDUCTOR_CARRY*" > /dev/null; then  # whole, or in parts (inductor.tgz.part00, 01, ...)
  cat "$INDUCTOR_CARRY"* | tar xz -C "$TORCHINDUCTOR_CACHE_DIR" && echo "Inductor cache from $INDUCTOR_CARRY*"
fi
inductor_save() {  # at most 16 MiB a file comes back: parts of 15 MiB (put them all in .gpucache/ as they are)
  tar czf /tmp/inductor.tgz -C "$TORCHINDUCTOR_CACHE_DIR" . 2> /dev/null || return 0
  split -b 15M -d /tmp/inductor.tgz "$OUT/inductor.tgz.part" && rm -f /tmp/inductor.tgz
}
trap inductor_save EXIT

. "$(dirname "$0")/gpu_wheels.sh"  # install_wheels DIR [SITE]

preflight() {  # fail at once, in env.txt, on a missing package, not minutes in
  {
    "$PY" -c "import grpc, grpc_health, grpc_reflection, google.protobuf as p, numpy, cv2, torch; \
print('python', __import__('sys').version.split()[0], 'grpc', grpc.__version__, 'protobuf', p.__version__, \
'numpy', numpy.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())" &&
    { [ "$RUNNERS" = cpu ] || "$PY" -c "import torchvision; print('torchvision', torchvision.__version__)"; } &&
    "$PY" -c "import bridge.runtime.serve, bridge.bench.serve, bridge.serving.grpc_service, bridge.timecode; print('bridge imports')"
  } 2>&1 | tee "$OUT/env.txt"
  local rc=${PIPESTATUS[0]}
  { nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv 2>&1 || true; \
    echo "nproc $(nproc)"; grep -m1 "model name" /proc/cpuinfo || true  # hosts of one GPU kind differ in CPU
    git rev-parse HEAD 2>/dev/null || true; } | tee -a "$OUT/env.txt"
  [ "$rc" = 0 ] || { echo "preflight failed"; exit 3; }
}

stamp() {  # each line prefixed by the unix time it arrived (no fork a line: bash's EPOCHREALTIME)
  while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done
}

load_start() {  # LOAD=1: whole-host CPU (/proc/stat, tools/measure/host_load.py) and nvidia-smi dmon sampled each second
  [ "${LOAD:-0}" = 1 ] || return 0
  mkdir -p "$OUT/load-$MODE"
  "$PY" tools/measure/host_load.py sample "$OUT/load-$MODE/host.jsonl" & LOAD_PIDS=$!
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi dmon -s pucm -o DT -d 1 > "$OUT/load-$MODE/dmon.txt" 2>&1 & LOAD_PIDS="$LOAD_PIDS $!"
    # GPM (Hopper): graphics activity, SM activity, SM occupancy, tensor activity, DRAM bandwidth, as % of peak
    nvidia-smi dmon --gpm-metrics 1,2,3,5,10 -o DT -d 1 > "$OUT/load-$MODE/gpm.txt" 2>&1 & LOAD_PIDS="$LOAD_PIDS $!"
  fi
  command -v mpstat > /dev/null && { mpstat -P ALL 1 > "$OUT/load-$MODE/mpstat.txt" 2>&1 & LOAD_PIDS="$LOAD_PIDS $!"; }
  return 0
}

load_summary() {  # NAME LOG SECS WARMUP [JSON]: the load in each window the bench measured, to NAME-load.json
  [ "${LOAD:-0}" = 1 ] || return 0
  local d=() f where=(--log "$2" --secs "$3" --warmup "$4")
  for f in "$OUT/load-$MODE/dmon.txt" "$OUT/load-$MODE/gpm.txt"; do [ -s "$f" ] && d+=(--dmon "$f"); done
  # the bench's JSON says each count's window itself (measured_unix); the log's times are the fallback
  [ -n "${5:-}" ] && grep -q measured_unix "$5" 2> /dev/null && where=(--bench-json "$5")
  "$PY" tools/measure/host_load.py summarise --host "$OUT/load-$MODE/host.jsonl" "${d[@]}" "${where[@]}" \
    --json "$OUT/$1-load.json" 2>&1 | tee -a "$OUT/$1.log"
}

load_stop() {
  [ -n "${LOAD_PIDS:-}" ] && kill $LOAD_PIDS 2> /dev/null; LOAD_PIDS=; return 0
}

bench() {  # NAME LIMIT_S ARGS...: one `facebridge bench serve`; the .partial stands in for a cut-short run
  local name=$1 limit=$2; shift 2
  timeout -k 20 "$limit" "$PY" -m bridge.cli bench serve --runners "$RUNNERS" --seconds "$SECONDS_PER_COUNT" \
    --in-flight "${IN_FLIGHT:-0}" --phases "${PHASES:-spread}" --json "$OUT/$name.json" "$@" 2>&1 | grep --line-buffered -v " INFO " | stamp \
    > "$OUT/$name.tlog"
  local rc=${PIPESTATUS[0]}
  tail -60 "$OUT/$name.tlog" > "$OUT/$name.log"
  echo "$name: exit $rc" >> "$OUT/$name.log"
  load_summary "$name" "$OUT/$name.tlog" "$SECONDS_PER_COUNT" 3 "$OUT/$name.json"
  if [ -f "$OUT/$name.json" ]; then rm -f "$OUT/$name.json.partial"; elif [ -f "$OUT/$name.json.partial" ]; then
    mv "$OUT/$name.json.partial" "$OUT/$name.json"; echo "$name: cut short, the counts that ended" | tee -a "$OUT/$name.log"; fi
  tail -8 "$OUT/$name.log"
}

unpack_ray() {
  if [ ! -d /tmp/site/ray ]; then
    cat /tmp/stage/site.tar.xz.part-* > /tmp/site.tar.xz && mkdir -p /tmp/site && tar -xJf /tmp/site.tar.xz -C /tmp/site \
      || { echo "unpack failed: stage part-aa first, in a call just before this one"; exit 2; }
  fi
  export PYTHONPATH=/tmp/site:$PYTHONPATH
  preflight
  "$PY" -c "import ray, ray.serve; print('ray', ray.__version__)" | tee -a "$OUT/env.txt" || exit 3
}

mps_start() {  # MPS=1: the MPS daemon, a user-space one (GPU settings, compute mode and MIG, stay as they are)
  [ "${MPS:-0}" = 1 ] || return 0
  command -v nvidia-cuda-mps-control > /dev/null || { echo "no nvidia-cuda-mps-control here"; exit 5; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo "MPS daemon started" | tee -a "$OUT/env.txt"
}

mps_stop() {  # a bench cut short by its time limit can leave its servers behind, and the daemon's quit waits for them
  pkill -KILL -f -- "-m bridge.cli serve --quiet --grpc 127.0.0.1:0" 2> /dev/null
  [ "${MPS:-0}" = 1 ] && { echo quit | timeout 20 nvidia-cuda-mps-control; sleep 1; }
  return 0
}

spy_fronts() {  # SPY_AT (a line of the bench log, e.g. "1000 streams x 30 fps"): SPY_S seconds after it, py-spy on the
  # engine and on one front end, the interpreter lock's holders (--gil) then every thread, into fronts-spy.txt
  local spy=${SPY:-/tmp/site/bin/py-spy} f="$OUT/fronts-spy.txt"
  for _ in $(seq 600); do grep -q -- "$SPY_AT" "$OUT/fronts.tlog" 2> /dev/null && break; sleep 1; done
  sleep "${SPY_AFTER:-20}"
  local engine front
  engine=$(pgrep -f -- "-m bridge.cli serve" | head -1) front=$(pgrep -f "bridge.runtime.serve_front_end" | head -1)
  for who in "engine $engine" "front-end $front"; do
    set -- $who
    [ -n "${2:-}" ] || { echo "$1: no process found" >> "$f"; continue; }
    "$spy" record -p "$2" -d "${SPY_S:-6}" -r 200 --gil -f raw -o "/tmp/$1-gil.txt" --nonblocking > /dev/null 2>&1
    local how=(--nonblocking)  # --native must pause the process to sample (py-spy refuses it with --nonblocking)
    [ -n "${SPY_NATIVE:-}" ] && how=(--native)
    "$spy" record -p "$2" -d "${SPY_S:-6}" -r 200 -f raw -o "/tmp/$1-all.txt" "${how[@]}" > "/tmp/$1-all.log" 2>&1 \
      || tail -3 "/tmp/$1-all.log" >> "$f"
    { echo "== $1 (pid $2): the lock's holders"; "$PY" tools/measure/pyspy_top.py "/tmp/$1-gil.txt" --top 40
      echo "== $1 (pid $2): every thread"; "$PY" tools/measure/pyspy_top.py "/tmp/$1-all.txt" --top 40; } >> "$f" 2>&1
  done
}

case "$MODE" in
  all|tests)  # tests: the GPU tests alone (TESTS: a -k expression to pick some)
    for wheels in $WHEELS; do install_wheels "$wheels" || exit 4; done
    preflight
    # a line a test (-v): a run cut short by its limit still says which passed
    timeout -k 10 "${T_TESTS:-180}" "$PY" -m pytest -v -rs -p no:cacheprovider tests/multistream/test_gpu.py \
      --tb=short ${TESTS:+-k "$TESTS"} > "$OUT/gpu-tests.txt" 2>&1
    echo "gpu tests: exit $?" >> "$OUT/gpu-tests.txt"
    grep -E "PASSED|FAILED|ERROR|exit" "$OUT/gpu-tests.txt" | tail -30
    [ "$MODE" = tests ] && exit 0
    bench serve-1proc "${T_ONE:-120}" --streams "${STREAMS_1:-32}" --client-processes 2
    P=${PROCS:-6}
    bench "serve-${P}proc" "${T_MANY:-200}" --streams "${STREAMS_N:-256,1024}" --server-processes "$P" \
      --client-processes "${CLIENTS:-8}" ;;
  procs)  # the many-process bench once per entry of SERVE_ARGS ("A;B": serve arguments), under MPS when MPS=1
    for wheels in $WHEELS; do install_wheels "$wheels" || exit 4; done
    preflight
    P=${PROCS:-8}
    mps_start
    load_start
    i=0
    IFS=';' read -ra variants <<< "${SERVE_ARGS:-}"
    for extra in "${variants[@]:-}"; do
      i=$((i + 1))
      bench "serve-${P}proc-$i" "${T_MANY:-200}" --streams "${STREAMS_N:-512}" --server-processes "$P" \
        --client-processes "${CLIENTS:-8}" --serve-args "$extra"
    done
    load_stop
    mps_stop ;;
  describe)
    for wheels in $WHEELS; do install_wheels "$wheels" || exit 4; done
    preflight
    timeout -k 10 "${T_DESCRIBE:-300}" "$PY" -m bridge.cli bench describe --streams "${DESCRIBE_STREAMS:-1,64,256,1024}" \
      --json "$OUT/describe-host.json" 2>&1 | grep -v " INFO " | tail -20 | tee "$OUT/describe-host.log" ;;
  profile)  # where one serve process's CPU goes: py-spy (a wheel in WHEELS) on it while bench serve loads it
    for wheels in $WHEELS; do install_wheels "$wheels" || exit 4; done
    preflight
    port=50999 spy=${SPY:-/tmp/site/bin/py-spy}
    # --prewarm: the batched service is built and its CUDA graphs captured (for every batch bucket up to
    # --max-streams) before it listens, not on the first stream
    "$PY" -m bridge.cli serve --runners "$RUNNERS" --grpc "127.0.0.1:$port" --max-streams "${PROFILE_STREAMS:-128}" \
      --prewarm 480x360 \
      > "$OUT/profile-serve.log" 2>&1 & spid=$!
    for _ in $(seq "${T_START:-240}"); do grep -q "listening on" "$OUT/profile-serve.log" && break; sleep 1; done
    timeout -k 10 $(( ${SECS:-30} + 120 )) "$PY" -m bridge.cli bench serve --address "127.0.0.1:$port" \
      --streams "${PROFILE_STREAMS:-128}" --seconds $(( ${SECS:-30} + 10 )) --warmup 10 --in-flight "${IN_FLIGHT:-1}" \
      --phases "${PHASES:-spread}" --client-processes "${CLIENTS:-4}" --json "$OUT/profile-bench.json" 2>&1 | stamp > "$OUT/profile-bench.log" &
    bpid=$!
    load_start
    sleep 20
    # --gil: only the thread holding the interpreter lock (what the lock is spent on); then every thread
    "$spy" record -p "$spid" -d "${SPY_S:-8}" -r 200 --gil -f raw -o /tmp/gil.txt --nonblocking > /dev/null 2>&1
    { top -H -b -n 2 -d 3 -p "$spid" | tail -25 || ps -L -o tid,pcpu,comm -p "$spid"; } > "$OUT/profile-threads.txt" 2>&1
    "$spy" record -p "$spid" -d "${SPY_S:-8}" -r 200 -f raw -o /tmp/all.txt --nonblocking > /dev/null 2>&1
    wait "$bpid"; kill "$spid"; load_stop
    load_summary profile "$OUT/profile-bench.log" $(( ${SECS:-30} + 10 )) 10 "$OUT/profile-bench.json"
    { "$PY" tools/measure/pyspy_top.py /tmp/gil.txt; "$PY" tools/measure/pyspy_top.py /tmp/all.txt; } > "$OUT/profile-top.txt" 2>&1
    cp /tmp/gil.txt "$OUT/profile-gil-raw.txt"; cp /tmp/all.txt "$OUT/profile-all-raw.txt"
    tail -3 "$OUT/profile-bench.log"; head -40 "$OUT/profile-top.txt" ;;
  wires)  # the batched wire against Track (issue 43): one prewarmed server, the same load over each wire in turn
    for wheels in $WHEELS; do install_wheels "$wheels" || exit 4; done
    preflight
    port=50998
    "$PY" -m bridge.cli serve --runners "$RUNNERS" --grpc "127.0.0.1:$port" --max-streams "${WIRE_STREAMS_MAX:-512}" \
      --prewarm 480x360 ${SERVE_ARGS:-} > "$OUT/wires-serve.log" 2>&1 & spid=$!
    for _ in $(seq "${T_START:-300}"); do grep -q "listening on" "$OUT/wires-serve.log" && break; sleep 1; done
    timeout -k 10 "${T_WIRE:-300}" "$PY" -m bridge.cli bench serve --address "127.0.0.1:$port" \
      --wire "${WIRES:-track,many}" --rounds "${ROUNDS:-1}" --streams "${STREAMS_N:-64,256}" \
      --seconds "$SECONDS_PER_COUNT" --warmup 5 --in-flight "${IN_FLIGHT:-1}" --client-processes "${CLIENTS:-4}" \
      --phases "${PHASES:-spread}" --json "$OUT/wires.json" 2>&1 | grep -v " INFO " | tail -8
    kill "$spid"; tail -3 "$OUT/wires-serve.log" ;;
  fronts)  # the engine process and its front-end processes (issue 43), one server for every wire and count
    for wheels in $WHEELS; do install_wheels "$wheels" || exit 4; done
    preflight
    df -h /dev/shm | tee -a "$OUT/env.txt"
    load_start
    mps_start
    [ -n "${SPY_AT:-}" ] && { spy_fronts & SPY_PID=$!; }
    IFS=';' read -ra CONFIGS <<< "${SERVE_ARGS:-}"
    [[ "${SERVE_ARGS:-}" == *";" ]] && CONFIGS+=("")  # read drops a trailing empty entry: "--x;" is two configurations
    [ "${#CONFIGS[@]}" -gt 0 ] || CONFIGS=("")
    for k in "${!CONFIGS[@]}"; do
      name=fronts; [ "${#CONFIGS[@]}" -gt 1 ] && name=fronts-$((k + 1))
      echo "$name: serve args: ${CONFIGS[$k]:-(none)}" | tee -a "$OUT/env.txt"
      IN_FLIGHT=${IN_FLIGHT:-1} bench "$name" "${T_FRONTS:-540}" --streams "${STREAMS_N:-1000}" \
        --client-processes "${CLIENTS:-8}" --wire "${WIRES:-track}" --server-processes "${PROCS:-1}" \
        --serve-args "--front-ends ${FRONT_ENDS:-8} --frame-slot-kib ${SLOT_KIB:-48} --updates off ${CONFIGS[$k]}"
      grep -E "front end|engine:" "$OUT/$name.tlog" | tail -5
      # at most 8 files come back: with several configurations each keeps its JSON, log and load summary
      [ "${#CONFIGS[@]}" -gt 1 ] && rm -f "$OUT/$name.tlog"
    done
    load_stop
    mps_stop
    [ -n "${SPY_PID:-}" ] && { wait "$SPY_PID"; tail -45 "$OUT/fronts-spy.txt"; }
    # the per-second samples are summarised in fronts*-load.json
    rm -rf "$OUT/load-fronts" ;;
  stage)
    cp "${2:?DIR}"/* /tmp/stage/ && ls -la /tmp/stage ;;
  ray)
    [ -n "${2:-}" ] && cp "$2"/* /tmp/stage/
    unpack_ray
    bench serve-h200-ray 480 --ray-replicas "${RAY_REPLICAS:-4}" --ray-gpus-per-replica "${RAY_GPU_SHARE:-0.25}" \
      --streams "${RAY_STREAMS:-256,512,1024}" --client-processes "${CLIENTS:-8}" ;;
  two-gpu)  # the same build on one GPU, then two (one replica each), then two with a replica killed mid-run
    [ -n "${2:-}" ] && cp "$2"/* /tmp/stage/
    unpack_ray
    N1=${N1:-256}; N2=${N2:-512}
    for run in "1 $N1 one" "2 $N2 two" "2 $N2 two-kill"; do
      set -- $run
      extra=(); [ "$3" = two-kill ] && extra=(--kill-replica-at 15)
      bench "serve-h200x2-$3" 200 --ray-replicas "$1" --ray-gpus-per-replica 1 --streams "$2" \
        --client-processes "${CLIENTS:-8}" "${extra[@]}"
    done ;;
  *) echo "unknown mode $MODE: all | procs | describe | profile | wires | fronts | stage DIR | ray [DIR] | two-gpu [DIR]"; exit 2 ;;
esac
