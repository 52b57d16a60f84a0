"""`facebridge serve`: many remote face streams on one batched tracker, or on Ray Serve replicas (one per GPU).
Argument parsing only: the server is bridge/runtime/serve.py, the scale-out bridge/runtime/ray_serve.py."""
from __future__ import annotations

from bridge.engines.cuda_wait import SCHED_FLAGS
from bridge.errors import FaceBridgeError

DEFAULT_SERVE = "127.0.0.1:50061"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve", help="serve many remote face streams (frames in, FaceFrames out) on this machine's GPU",
        description="Serve the facebridge.v1.FaceServeService Track stream: clients (`facebridge run --remote`) "
                    "send camera images, each gets its own full FaceFrame stream back. Latest wins per stream: "
                    "stale images are dropped and reported to their client.")
    p.add_argument("--grpc", default=DEFAULT_SERVE, metavar="HOST:PORT",
                   help=f"where to listen (default {DEFAULT_SERVE}); beyond 127.0.0.1 needs --grpc-token. With "
                        "--ray-replicas, replica i listens on PORT+i")
    p.add_argument("--runners", choices=["cpu", "torch-cuda", "onnxruntime-cuda"], default="cpu",
                   help="the batched models: cpu (ONNX Runtime on the CPU, any machine), torch-cuda (compiled, "
                        "fp16, whole passes as CUDA graphs: the fastest) or onnxruntime-cuda")
    p.add_argument("--max-streams", type=int, default=16, metavar="N",
                   help="face streams served at once (per replica); more are refused (default 16)")
    p.add_argument("--deadline-ms", type=float, default=100.0, metavar="MS",
                   help="drop an image that waited longer than this (default 100; a client may ask for less)")
    p.add_argument("--prewarm", default="", metavar="WxH[,WxH]",
                   help="build the batched service for these frame sizes at start (GPU: compile and capture before "
                        "the first client), e.g. 640x480,480x360")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="CPU runners: threads per model (default 1)")
    p.add_argument("--identity-workers", type=int, default=1, metavar="N",
                   help="threads that refresh every stream's identity, off the streams' own (default 1): a new "
                        "stream's identity converges as fast as they allow")
    p.add_argument("--decode-workers", type=int, default=0, metavar="N",
                   help="threads that decode JPEG (default 0: one a core, at most 8); every stream's gRPC work runs "
                        "on one event loop beside them")
    p.add_argument("--cuda-wait", choices=sorted(SCHED_FLAGS), default="block",
                   help="GPU runners: how host threads wait for the GPU (default block: they sleep in the driver; "
                        "CUDA's own auto spins a core through every wait, which starves the host work of several "
                        "serve processes sharing a GPU)")
    p.add_argument("--jpeg-batches", choices=("auto", "on", "off"), default="auto",
                   help="decode every JPEG waiting in one call on one thread (auto, the default: with GPU runners, "
                        "one batched nvJPEG decode; on: also on the CPU), or each on the decode workers (off)")
    p.add_argument("--jpeg-decoder", choices=("torchvision", "nvimgcodec"), default="torchvision",
                   help="GPU runners: the JPEG decoder (torchvision's nvJPEG, the default: one decoder a process; "
                        "nvimgcodec: nvImageCodec, a decoder a decoding thread on its own high-priority stream, "
                        "installed apart: pip install nvidia-nvimgcodec-cu13)")
    p.add_argument("--switch-interval-ms", type=float, default=None, metavar="MS",
                   help="how long one of the server's threads may hold Python's interpreter lock while another "
                        "waits for it (default: Python's 5 ms)")
    p.add_argument("--write-deadline", type=float, default=10.0, metavar="S",
                   help="end a stream whose client took no response for this long (it stopped reading; default 10)")
    p.add_argument("--frame-sizes", default="", metavar="WxH[,WxH]",
                   help="accept only images of these sizes, e.g. 640x480,1280x720 (default: any, up to 4 sizes a "
                        "server: each builds a batched service on first use)")
    p.add_argument("--idle-timeout", type=float, default=30.0, metavar="S",
                   help="end a stream whose client sent no image for this long, freeing its slot (0: never; "
                        "default 30)")
    p.add_argument("--updates", default="auto", metavar="auto|DIR|off",
                   help="follow signed releases installed into this update store (default auto: the user's, "
                        "$FACEBRIDGE_HOME/updates): a newer release's runners are built and checked in the "
                        "background and swapped in between two passes")
    p.add_argument("--grpc-token", metavar="TOKEN", help="bearer token clients must send")
    p.add_argument("--grpc-tls-cert", metavar="PEM", help="TLS certificate")
    p.add_argument("--grpc-tls-key", metavar="PEM", help="TLS private key")
    p.add_argument("--no-smoothing", action="store_true", help="turn off the One-Euro filters")
    p.add_argument("--no-calibration", action="store_true", help="ignore stored calibration profiles")
    p.add_argument("--fp32", action="store_true", help="GPU runners: full precision instead of fp16")
    p.add_argument("--ray-replicas", type=int, default=0, metavar="N",
                   help="scale out on Ray Serve: N replicas (one per GPU with GPU runners), each with its own "
                        "port (direct ingress); 0 (default) serves in this process")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="join this Ray cluster (many machines) instead of starting a local head on 127.0.0.1")
    p.add_argument("--ray-dir", metavar="DIR", default=None,
                   help="where a local Ray head keeps its temporary files and token (default: a new temp dir)")
    p.add_argument("--ray-gpus-per-replica", type=float, default=None, metavar="G",
                   help="GPU share of each replica (default 1 with GPU runners: one replica per GPU; 0.25 puts four "
                        "replicas, four processes of host work, on one GPU)")
    p.add_argument("--haproxy-config", metavar="FILE",
                   help="with --ray-replicas: also write an HAProxy config that spreads streams over the replicas")
    p.add_argument("--max-streams-per-peer", type=int, default=None, metavar="N",
                   help="face streams one client host may hold at once (default: no limit below --max-streams; set "
                        "it where many hosts share a server, not behind one proxy, whose streams all come from it)")
    p.add_argument("--max-frame-sizes", type=int, default=4, metavar="N",
                   help="frame sizes with a batched service at once (default 4); a new size takes the place of the "
                        "least recently used one that no stream uses, whose memory is freed")
    p.add_argument("--front-ends", type=int, default=0, metavar="N",
                   help="serve the gRPC streams from N front-end processes (front end i on PORT+i) while this "
                        "process, the engine, owns the runners, every image's decode and every batched pass, "
                        "exchanging frames and results with them through shared memory; a front end that dies "
                        "loses only its streams and is started again. 0 (default): everything in this process")
    p.add_argument("--decode-processes", type=int, default=0, metavar="N",
                   help="with --front-ends: decode the JPEGs in N processes of their own instead of the engine's "
                        "(frames up to 1280x720 or the largest --prewarm size; a front end's always in the same "
                        "one). On a GPU run them under MPS (nvidia-cuda-mps-control -d) to decode beside the "
                        "passes. Default 0: in the engine process")
    p.add_argument("--frame-slot-kib", type=int, default=512, metavar="KIB",
                   help="with --front-ends: the largest image a stream may send, in KiB (each stream's slot of "
                        "shared memory; default 512: a 1080p JPEG)")
    p.add_argument("--pass-batch", type=int, default=0, metavar="N",
                   help="the most frames a batched pass (and a GPU JPEG decode) takes (default 0: every stream's "
                        "at once); smaller passes let one pass's decode, inference and describe step overlap "
                        "those of the next (on an H100 at 1,000 streams they did not pay while one thread's JPEG "
                        "decode was the limit: docs/PERFORMANCE.md)")
    p.add_argument("--quiet", action="store_true", help="no status line every 5 s")
    p.set_defaults(func=run)


def _sizes(text: str, flag: str = "--prewarm") -> tuple[tuple[int, int], ...]:
    sizes = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        w, _, h = part.lower().partition("x")
        if not (w.isdigit() and h.isdigit()) or min(int(w), int(h)) < 32:
            raise FaceBridgeError(f"{flag} size {part!r} is not WIDTHxHEIGHT", f"write e.g. {flag} 640x480")
        sizes.append((int(h), int(w)))
    return tuple(sizes)


def serve_config(args):
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.runtime.serve import ServeConfig

    if args.identity_workers < 1:
        raise FaceBridgeError("--identity-workers must be at least 1", "pass e.g. --identity-workers 1 (the default)")
    if args.decode_workers < 0:
        raise FaceBridgeError(f"--decode-workers {args.decode_workers} is negative",
                              "pass a number of threads, or 0 (the default) for one a core")
    if not args.write_deadline > 0:
        raise FaceBridgeError(f"--write-deadline {args.write_deadline} is not a positive number of seconds",
                              "pass e.g. --write-deadline 10 (the default)")
    if args.switch_interval_ms is not None and not 0.01 <= args.switch_interval_ms <= 100:
        raise FaceBridgeError(f"--switch-interval-ms {args.switch_interval_ms} is outside 0.01..100",
                              "pass e.g. --switch-interval-ms 1, or leave it out for Python's 5 ms")
    frame_sizes = _sizes(args.frame_sizes, "--frame-sizes")
    if args.max_frame_sizes < 1:
        raise FaceBridgeError(f"--max-frame-sizes {args.max_frame_sizes} is below 1", "pass e.g. 4 (the default)")
    if len(set(frame_sizes)) > args.max_frame_sizes:
        raise FaceBridgeError(f"--frame-sizes names {len(set(frame_sizes))} sizes; a server serves at most "
                              f"{args.max_frame_sizes} (--max-frame-sizes)",
                              "name fewer sizes, raise --max-frame-sizes, or run another server for the others")
    if args.max_streams_per_peer is not None and args.max_streams_per_peer < 1:
        raise FaceBridgeError(f"--max-streams-per-peer {args.max_streams_per_peer} is below 1",
                              "pass a number of streams, or leave it out (no limit below --max-streams)")
    if not args.idle_timeout >= 0:
        raise FaceBridgeError(f"--idle-timeout {args.idle_timeout} is not 0 or a positive number of seconds",
                              "pass e.g. --idle-timeout 30 (the default), or 0 to keep idle streams")

    if args.front_ends < 0:
        raise FaceBridgeError(f"--front-ends {args.front_ends} is negative",
                              "pass a number of front-end processes, or 0 (the default) to serve in one process")
    if args.front_ends and args.ray_replicas:
        raise FaceBridgeError("--front-ends and --ray-replicas both split the server into processes",
                              "pick one: --front-ends on one GPU machine, --ray-replicas across GPUs")
    if args.front_ends > args.max_streams:
        raise FaceBridgeError(f"--front-ends {args.front_ends} is more than --max-streams {args.max_streams}",
                              "run at most one front end a stream")
    if args.decode_processes < 0 or (args.decode_processes and not args.front_ends):
        raise FaceBridgeError(f"--decode-processes {args.decode_processes} needs --front-ends and a count of 0 or more",
                              "pass e.g. --front-ends 8 --decode-processes 2, or leave --decode-processes out")
    if args.pass_batch < 0:
        raise FaceBridgeError(f"--pass-batch {args.pass_batch} is negative",
                              "pass 0 (every stream at once) or the most frames a pass may take")
    if args.jpeg_decoder == "nvimgcodec" and args.runners == "cpu":
        raise FaceBridgeError("--jpeg-decoder nvimgcodec decodes on the GPU; the CPU runners decode with OpenCV",
                              "pass --runners torch-cuda, or leave --jpeg-decoder out")
    if not 16 <= args.frame_slot_kib <= 8192:
        raise FaceBridgeError(f"--frame-slot-kib {args.frame_slot_kib} is outside 16..8192",
                              "pass e.g. 512 (the default)")

    return ServeConfig(grpc=args.grpc, runners=args.runners, max_streams=args.max_streams,
                       max_streams_per_peer=args.max_streams_per_peer, max_frame_sizes=args.max_frame_sizes,
                       deadline_ms=args.deadline_ms, token=args.grpc_token, tls_cert=args.grpc_tls_cert,
                       tls_key=args.grpc_tls_key, threads=args.threads, smoothing=not args.no_smoothing,
                       calibration=not args.no_calibration, fp16=not args.fp32,
                       prewarm=_sizes(args.prewarm), identity_workers=args.identity_workers,
                       write_deadline_s=args.write_deadline, idle_timeout_s=args.idle_timeout,
                       frame_sizes=frame_sizes, decode_workers=args.decode_workers, cuda_wait=args.cuda_wait,
                       jpeg_batches={"auto": None, "on": True, "off": False}[args.jpeg_batches],
                       updates=None if args.updates == "off" else args.updates,
                       switch_interval_ms=args.switch_interval_ms, front_ends=args.front_ends,
                       frame_slot_kib=args.frame_slot_kib, pass_batch=args.pass_batch,
                       jpeg_decoder=args.jpeg_decoder, decode_processes=args.decode_processes)


def run(args) -> int:
    config = serve_config(args)
    if args.ray_replicas:
        # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
        from bridge.runtime.ray_serve import serve_on_ray

        return serve_on_ray(config, args.ray_replicas, address=args.ray_address, work_dir=args.ray_dir,
                            haproxy_config=args.haproxy_config, status=not args.quiet,
                            gpus_per_replica=args.ray_gpus_per_replica)
    if config.front_ends:
        # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
        from bridge.runtime.serve_engine import serve_front_ends

        return serve_front_ends(config, status=not args.quiet, verbose=getattr(args, "verbose", False))
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.runtime.serve import serve

    return serve(config, status=not args.quiet)
