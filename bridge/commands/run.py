"""`facebridge run`: stream a face from a camera, video, image folder or the bundled sample. Argument parsing only:
the running bridge is bridge/runtime/session.py."""
from __future__ import annotations

import argparse
import sys

from bridge import console, ports
from bridge.sources import SOURCE_HELP
from bridge.stages.describe import EMOTION_EVERY

DEFAULT_LLF, DEFAULT_VMC, DEFAULT_MONITOR = ports.LIVE_LINK_FACE, ports.VMC, ports.MONITOR


def add_pipeline_arguments(p, inputs=None) -> None:
    """Options shared by run, calibrate and bench pipeline: where frames come from go to `inputs` (an argument
    group; default `p`), how they are tracked to `p`."""
    inputs = inputs if inputs is not None else p
    inputs.add_argument("--source", default=None, help=f"where frames come from: {SOURCE_HELP}")
    inputs.add_argument("--camera-size", type=camera_size, metavar="WxH",
                   help="ask the camera for this resolution, e.g. 1280x720 (default: the camera's own; what it "
                        "really gives is said at start when it differs)")
    inputs.add_argument("--camera-fps", type=float, metavar="FPS", help="ask the camera for this frame rate, e.g. 60")
    inputs.add_argument("--mirror", action="store_true",
                   help="process a mirror image: the avatar moves like your reflection (your right eye closes its "
                        "left eye; turning right turns it to its left)")
    inputs.add_argument("--subject", default="FaceBridge",
                   help="subject name shown in Unreal's Live Link panel and used for the calibration profile")
    p.add_argument("--backend", default="auto",
                   choices=["auto", "onnxruntime", "onnxruntime-cuda", "openvino", "litert", "tensorrt",
                            "tensorrt-rtx"],
                   help="inference backend (default auto: TensorRT > TensorRT-RTX > ONNX Runtime CUDA when usable, "
                        "else per model the CPU backend (LiteRT, OpenVINO, ONNX Runtime) measured fastest among those "
                        "that agree with ONNX Runtime; the choice and the reason are printed)")
    p.add_argument("--cpu-precision", choices=["f32", "bf16"], default="f32",
                   help="CPU inference precision (default f32). bf16 only where the CPU has it natively (AMX, "
                        "AVX512-BF16) and only with OpenVINO; it is faster there but moves landmarks by up to "
                        "about a pixel (docs/PERFORMANCE.md). The precision that runs is printed")
    p.add_argument("--landmarks", choices=["auto", "attention", "mesh+iris"], default="auto",
                   help="face landmark models: attention = MediaPipe's attention mesh, mesh, eyes and irises from one "
                        "model (LiteRT only); mesh+iris = face_landmark then iris_landmark on both eyes; auto "
                        "(default) = attention where the models run on the CPU and LiteRT is installed (closer to "
                        "MediaPipe refine and less CPU, docs/PERFORMANCE.md), else mesh+iris; the run names it")
    p.add_argument("--detector", choices=["auto", "short", "full"], default="auto",
                   help="face detector: short = BlazeFace short range (fast; faces a fifth of the frame wide or "
                        "more, within ~2 m), full = full range (faces down to ~6%% of a 16:9 frame's width, up to "
                        "~5 m; misses a face filling the frame), auto (default) = short range, and full range too "
                        "with --faces above 1 and after half a second without a face; the run names it")
    p.add_argument("--expression", choices=["regressor", "fit"], default="regressor",
                   help="blendshape estimator: the fast trained regressor (default) or the reference model fit")
    p.add_argument("--expression-model", metavar="DIR",
                   help="use your own ONNX expression model (a folder with the model and its manifest; see "
                        "docs/FACE.md 'Expression model contract') instead of the shipped regressor")
    p.add_argument("--emotion-every", type=int, default=EMOTION_EVERY, metavar="N",
                   help=f"classify emotion on every Nth frame and hold it between (default {EMOTION_EVERY}: it "
                        "changes slowly; 1 = every frame)")
    p.add_argument("--smoothing", type=float, default=1.0, metavar="STRENGTH",
                   help="One-Euro filter strength: 1 (default) as tuned, 2 twice as smooth (steadier at rest, more "
                        "lag on fast moves), 0.5 half as smooth, 0 off. Divides each filter's min cutoff and beta "
                        "(blendshapes 2.0 Hz / 1.5, head 0.8 Hz / 0.05, eyes 1.5 Hz / 0.05, emotion 1.0 Hz / 0.5) "
                        "by STRENGTH")
    p.add_argument("--no-smoothing", action="store_true", help="turn off the One-Euro filter (--smoothing 0)")
    for region, what in (("head", "head rotation and position"), ("eyes", "eye blendshapes and gaze"),
                         ("brows", "brow blendshapes"), ("mouth", "jaw, mouth, cheek, nose and tongue blendshapes")):
        p.add_argument(f"--smoothing-{region}", type=float, metavar="STRENGTH",
                       help=f"smoothing strength of the {what} alone (as --smoothing; default: the mapping's, else "
                            "--smoothing)")
    p.add_argument("--stages", choices=["auto", "1", "2"], default="auto",
                   help="inference threads: 2 overlaps tracking of the next frame with the rest of this one "
                        "(more frames per second on 2+ cores, same latency); auto = 2 when there are 2+ cores")


def camera_size(text: str) -> tuple[int, int]:
    """'1280x720' -> (1280, 720), for argparse."""
    try:
        width, height = (int(v) for v in text.lower().replace("*", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 1280x720") from None
    if not (16 <= width <= 8192 and 16 <= height <= 8192):
        raise argparse.ArgumentTypeError(f"{text!r}: width and height must be 16 to 8192 pixels")
    return width, height


def pipeline_options(args):
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.pipeline import PipelineOptions

    return PipelineOptions(backend=args.backend, cpu_precision=args.cpu_precision, subject=args.subject,
                           expression=args.expression,
                           expression_model=args.expression_model,
                           detector=args.detector,
                           landmarks=getattr(args, "landmarks", "auto"),
                           emotion_every=args.emotion_every,
                           smoothing=0.0 if args.no_smoothing else args.smoothing,
                           region_smoothing={region: value for region in ("head", "eyes", "brows", "mouth")
                                             if (value := getattr(args, f"smoothing_{region}", None)) is not None})


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run", help="track a face and stream it to Unreal, VMC receivers and recorders",
        description="Track a face and stream ARKit blendshapes, head pose and gaze. By default streams to Unreal's "
                    f"stock Live Link Face source on {DEFAULT_LLF} and to a VMC receiver on {DEFAULT_VMC}; "
                    "nothing leaves this machine unless you point an output elsewhere.")
    inputs = p.add_argument_group("where frames come from")
    tracking = p.add_argument_group("tracking")
    outputs = p.add_argument_group("outputs (Unreal, VMC, iFacialMocap, gRPC, takes)")
    tuning = p.add_argument_group("tuning the avatar (docs/MAPPING.md)")
    timecode = p.add_argument_group("timecode")
    audio = p.add_argument_group("audio and lip-sync")
    control = p.add_argument_group("console, monitor page and remote control")
    updates = p.add_argument_group("signed updates and remote tracking")
    add_pipeline_arguments(tracking, inputs)
    tracking.add_argument("--faces", type=int, default=1, metavar="N",
                   help="track up to N faces (default 1), each its own subject: name them with --subject A,B,... "
                        "(faces without a name get the first name and their number: FaceBridge2, ...); each face is "
                        "its own Live Link Face and gRPC subject and its own VMC target (see --vmc)")
    inputs.add_argument("--max-frames", type=int, default=None, metavar="N",
                   help="stop after N frames sent (dropped frames do not count)")
    inputs.add_argument("--fast", action="store_true",
                   help="process file sources as fast as possible instead of at their frame rate, keeping every frame "
                        "(an --audio file follows the frames in step; with --record a file keeps every frame anyway, "
                        "at its own rate)")
    outputs.add_argument("--llf", action="append", metavar="HOST:PORT",
                   help="Live Link Face (Unreal stock source) UDP target, or 'off'; repeat it for several editors "
                        f"(default {DEFAULT_LLF})")
    outputs.add_argument("--vmc", default=DEFAULT_VMC, metavar="HOST:PORT",
                   help=f"VMC/OSC receiver (VSeeFace, VNyan, Warudo, ...), or 'off' (default {DEFAULT_VMC}). With "
                        "--faces N: one HOST:PORT per face, comma-separated, or one address for N consecutive ports")
    outputs.add_argument("--vmc-no-bundle", action="store_true",
                   help="send VMC as plain OSC messages (for receivers that cannot read bundles)")
    outputs.add_argument("--vmc-expressions", default="arkit", metavar="SETS",
                   help="VMC blendshape names, comma-separated: arkit (52 PerfectSync names, default), vrm0 "
                        "(A I U E O Blink Joy ... for VRM 0.x avatars without ARKit shapes), vrm1 (aa ih ou ...)")
    outputs.add_argument("--vmc-eye-bones", action="store_true",
                   help="also send LeftEye/RightEye bones from the gaze (for avatars without eyeLook shapes)")
    outputs.add_argument("--ifm", metavar="HOST[:PORT]",
                   help="also send the iFacialMocap UDP protocol (VMagicMirror, VRCFaceTracking, VNyan, Warudo, "
                        "VSeeFace) to HOST (default port 49983)")
    tuning.add_argument("--mapping", metavar="FILE.json",
                   help="blendshape mapping (gain, offset, curve, dead zone, output range per blendshape; smoothing "
                        "per region; head dead zone: docs/MAPPING.md) instead of the one stored in the subject's "
                        "profile; applied after calibration, before every output")
    tuning.add_argument("--head-dead-zone", type=float, metavar="DEGREES",
                   help="the head holds still until it moves more than this (default: the mapping's, else 0)")
    control.add_argument("--osc-remote", metavar="[HOST:]PORT",
                   help="listen for OSC remote control as the Live Link Face app does (8000 in the app): /RecordStart "
                        "SLATE TAKE starts a take in --takes-dir named SLATE_TAKE, /RecordStop ends it, "
                        "/OSCSetSendTarget, /Slate, /Take, /BatteryQuery, /ThermalsQuery (docs/PROTOCOLS.md); "
                        "binds 127.0.0.1 unless HOST is given, which needs --osc-allow")
    control.add_argument("--osc-allow", metavar="IP,IP",
                   help="controller addresses the OSC remote control accepts beyond this machine")
    timecode.add_argument("--timecode-source", choices=["system", "ntp", "ltc"], default="system",
                   help="where timecode comes from: this machine's clock (default), an NTP server (--ntp-server), or "
                        "LTC audio on an input (--ltc-input, e.g. a Tentacle Sync into a microphone input); carried "
                        "into Live Link Face packets, takes, their CSV and USD")
    timecode.add_argument("--timecode-rate", metavar="FPS",
                   help="timecode rate: 23.976, 24, 25, 29.97, 30, 48, 50, 59.94 or 60 (29.97 and 59.94 drop-frame; "
                        "default: the source's frame rate); outputs state it as their frame rate")
    timecode.add_argument("--ltc-input", metavar="mic|mic:N|FILE",
                   help="the audio input LTC comes in on (default mic); a file plays at real time")
    timecode.add_argument("--ntp-server", metavar="HOST[:PORT]", help="NTP server for --timecode-source ntp "
                   "(default pool.ntp.org)")
    outputs.add_argument("--record", metavar="DIR", help="record the take (JSON lines + Live Link Face CSV) to DIR")
    outputs.add_argument("--grpc", metavar="HOST:PORT", help="serve the FaceBridge gRPC stream (Unreal plugin, "
                   "Omniverse) on HOST:PORT; binding beyond 127.0.0.1 needs --grpc-token")
    outputs.add_argument("--grpc-token", metavar="TOKEN|auto",
                   help="bearer token gRPC clients must send; beyond 127.0.0.1 at least 128 bits (e.g. 22 random "
                        "letters and digits); 'auto' makes a random one and prints it")
    outputs.add_argument("--grpc-tls-cert", metavar="PEM", help="TLS certificate for the gRPC server")
    outputs.add_argument("--grpc-tls-key", metavar="PEM", help="TLS private key for the gRPC server")
    control.add_argument("--monitor", default=DEFAULT_MONITOR, metavar="HOST:PORT|off",
                   help=f"serve the live monitor page, /metrics (Prometheus), /healthz and /readyz on HOST:PORT, or "
                        f"'off' (default {DEFAULT_MONITOR}; port 0 picks a free one; the URL is printed). Binding "
                        "beyond 127.0.0.1 needs --monitor-token")
    control.add_argument("--monitor-token", metavar="TOKEN|auto",
                   help="token the monitor asks for (open the page as /?token=TOKEN; scrapers send "
                        "'Authorization: Bearer TOKEN'); /healthz and /readyz stay open. Beyond 127.0.0.1 at least "
                        "128 bits; 'auto' makes a random one and prints it")
    control.add_argument("--monitor-tls-cert", metavar="PEM", help="TLS certificate for the monitor (serves https)")
    control.add_argument("--monitor-tls-key", metavar="PEM", help="TLS private key for the monitor")
    outputs.add_argument("--takes-dir", default="takes", metavar="DIR",
                   help="where takes started from the monitor page's Record button go (default ./takes)")
    tuning.add_argument("--no-calibration", action="store_true", help="ignore the subject's stored calibration")
    audio.add_argument("--audio", metavar="mic|mic:N|sample|FILE", help="also drive the mouth from speech: a "
                   "microphone (`facebridge devices` lists them), the bundled sample voice, or an audio file, "
                   "played at real time")
    audio.add_argument("--audio-only", action="store_true",
                   help="no camera: the audio (--audio) drives the mouth, everything else stays neutral")
    updates.add_argument("--updates", nargs="?", const="auto", default="auto", metavar="STATE",
                   help="follow the signed-updates store live: when `fedagent update install` (or rollback) changes a "
                        "model's active release, the new model is built and checked in the background and swapped in "
                        "between two frames (default: the per-user store, followed even before anything is installed "
                        "there); a release that fails in service is rolled back by itself; 'off' turns it off")
    audio.add_argument("--adapter", metavar="FILE.npz",
                       help="try a lip-sync adapter locally (with --audio) instead of the installed one; needs "
                            "--adapter-sha256")
    audio.add_argument("--adapter-sha256", metavar="HEX", help="the adapter file's sha256 (at least 12 hex digits), "
                   "checked before it is used")
    audio.add_argument("--learn", nargs="?", const="", default=None, metavar="DIR",
                   help="with --audio and a camera: keep short windows of speech features with the camera's mouth "
                        "weights (only while the face and mouth are clearly seen) in a bounded, owner-only store on "
                        "this device, for `fedagent client` (default store $FACEBRIDGE_HOME/learn)")
    audio.add_argument("--learn-keep-audio", action="store_true",
                   help="with --learn: also keep the raw audio of each window (off by default)")
    updates.add_argument("--remote", metavar="HOST:PORT",
                   help="track on a `facebridge serve` box instead of this machine: send the frames there (JPEG) "
                        "and stream what comes back to the outputs here")
    updates.add_argument("--remote-token", metavar="TOKEN", help="bearer token of the remote server")
    updates.add_argument("--remote-tls-ca", metavar="PEM", help="CA certificate of a remote server that uses TLS")
    control.add_argument("--quiet", action="store_true", help="no live status line")
    p.set_defaults(func=run)


def outputs_config(args):
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.runtime.session import OutputConfig, address_or_off, llf_targets

    return OutputConfig(
        llf=llf_targets(args.llf, DEFAULT_LLF), vmc=address_or_off(args.vmc), vmc_bundle=not args.vmc_no_bundle,
        vmc_expressions=tuple(e.strip() for e in args.vmc_expressions.split(",") if e.strip()),
        vmc_eye_bones=args.vmc_eye_bones, record=args.record, ifm=address_or_off(args.ifm), grpc=args.grpc,
        grpc_token=args.grpc_token,
        grpc_tls_cert=args.grpc_tls_cert, grpc_tls_key=args.grpc_tls_key)


def run_config(args):
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.runtime.session import RunConfig, address_or_off

    return RunConfig(source=args.source, fast=args.fast, camera_size=args.camera_size, camera_fps=args.camera_fps,
                     mirror=args.mirror, max_frames=args.max_frames, subject=args.subject, faces=args.faces,
                     pipeline=pipeline_options(args), stages=args.stages, audio=args.audio,
                     audio_only=args.audio_only, learn=args.learn, learn_audio=args.learn_keep_audio,
                     calibration=not args.no_calibration, status_line=not args.quiet,
                     outputs=outputs_config(args), updates=address_or_off(args.updates), adapter=args.adapter,
                     adapter_sha256=args.adapter_sha256, monitor=address_or_off(args.monitor),
                     monitor_token=args.monitor_token, monitor_tls_cert=args.monitor_tls_cert,
                     monitor_tls_key=args.monitor_tls_key, takes_dir=args.takes_dir, remote=args.remote,
                     remote_token=args.remote_token, remote_tls_ca=args.remote_tls_ca, mapping=args.mapping,
                     head_dead_zone=args.head_dead_zone, osc_remote=address_or_off(args.osc_remote),
                     osc_allow=tuple(a.strip() for a in (args.osc_allow or "").split(",") if a.strip()),
                     timecode_source=args.timecode_source, timecode_rate=args.timecode_rate,
                     ltc_input=args.ltc_input, ntp_server=args.ntp_server)


def run(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.runtime.options import run_warnings
    from bridge.runtime.session import BridgeSession
    from bridge.runtime.summary import summary_lines

    config = run_config(args)
    session = BridgeSession(config)  # checks the options first (runtime/options.py check_run_config)
    for line in [] if args.quiet else run_warnings(config):
        print(f"facebridge: warning: {line}", file=sys.stderr, flush=True)
    with session:
        if not args.quiet:
            for line in session.describe(verbose=args.verbose):
                print(f"facebridge: {line}", flush=True)
        elif args.grpc:  # a port the system chose (HOST:0) must be said even when quiet
            print(f"facebridge: {session.grpc_address()}", flush=True)
        for line in session.generated_tokens():  # `auto` tokens: said once, even when quiet
            print(f"facebridge: {line}", flush=True)
        summary = session.run()
    for line in summary_lines(summary):
        print(f"facebridge: {line}")
    if summary.interrupted:  # what was done is kept (a take is closed whole); Ctrl-C's exit status
        return console.interrupted("facebridge")
    return 1 if summary.failed else 0
