"""`facebridge run`: stream a face from a camera, video, image folder or the bundled sample."""
from __future__ import annotations

import argparse
import logging
import os
import threading

from bridge.errors import FaceBridgeError
from bridge.sources import SOURCE_HELP

log = logging.getLogger(__name__)

DEFAULT_LLF = "127.0.0.1:11111"
DEFAULT_VMC = "127.0.0.1:39539"


def add_pipeline_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by run, calibrate and bench pipeline."""
    p.add_argument("--source", default=None, help=f"where frames come from: {SOURCE_HELP}")
    p.add_argument("--subject", default="FaceBridge",
                   help="subject name shown in Unreal's Live Link panel and used for the calibration profile")
    p.add_argument("--backend", default="auto",
                   choices=["auto", "onnxruntime", "onnxruntime-cuda", "openvino", "tensorrt", "tensorrt-rtx"],
                   help="inference backend (default auto: the fastest one installed and usable here, "
                        "TensorRT > TensorRT-RTX > ONNX Runtime CUDA > OpenVINO > ONNX Runtime CPU; the choice and "
                        "the reason are printed)")
    p.add_argument("--detector", choices=["short", "full"], default="short",
                   help="BlazeFace short range (faces within ~2 m, default) or full range (up to ~5 m)")
    p.add_argument("--expression", choices=["regressor", "fit"], default="regressor",
                   help="blendshape estimator: the fast trained regressor (default) or the reference model fit")
    p.add_argument("--expression-model", metavar="DIR",
                   help="use your own ONNX expression model (a folder with the model and its manifest; see "
                        "docs/ARCHITECTURE.md 'Expression model contract') instead of the shipped regressor")
    p.add_argument("--emotion-every", type=int, default=1, metavar="N",
                   help="classify emotion on every Nth frame (default 1; emotion changes slowly)")
    p.add_argument("--no-smoothing", action="store_true", help="turn off the One-Euro filter")
    p.add_argument("--stages", choices=["auto", "1", "2"], default="auto",
                   help="inference threads: 2 overlaps tracking of the next frame with the rest of this one "
                        "(more frames per second on 2+ cores, same latency); auto = 2 when there are 2+ cores")


def pipeline_options(args):
    from bridge.pipeline import PipelineOptions

    return PipelineOptions(backend=args.backend, subject=args.subject, expression=args.expression,
                           expression_model=args.expression_model,
                           detector=f"face_detection_{args.detector}_range",
                           emotion_every=args.emotion_every, smoothing=not args.no_smoothing)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run", help="track a face and stream it to Unreal, VMC receivers and recorders",
        description="Track a face and stream ARKit blendshapes, head pose and gaze. By default streams to Unreal's "
                    f"stock Live Link Face source on {DEFAULT_LLF} and to a VMC receiver on {DEFAULT_VMC}; "
                    "nothing leaves this machine unless you point an output elsewhere.")
    add_pipeline_arguments(p)
    p.add_argument("--max-frames", type=int, default=None, metavar="N", help="stop after N frames")
    p.add_argument("--fast", action="store_true",
                   help="process file sources as fast as possible instead of at their frame rate")
    p.add_argument("--llf", default=DEFAULT_LLF, metavar="HOST:PORT",
                   help=f"Live Link Face (Unreal stock source) UDP target, or 'off' (default {DEFAULT_LLF})")
    p.add_argument("--vmc", default=DEFAULT_VMC, metavar="HOST:PORT",
                   help=f"VMC/OSC receiver (VSeeFace, VNyan, Warudo, ...), or 'off' (default {DEFAULT_VMC})")
    p.add_argument("--vmc-no-bundle", action="store_true",
                   help="send VMC as plain OSC messages (for receivers that cannot read bundles)")
    p.add_argument("--vmc-expressions", default="arkit", metavar="SETS",
                   help="VMC blendshape names, comma-separated: arkit (52 PerfectSync names, default), vrm0 "
                        "(A I U E O Blink Joy ... for VRM 0.x avatars without ARKit shapes), vrm1 (aa ih ou ...)")
    p.add_argument("--vmc-eye-bones", action="store_true",
                   help="also send LeftEye/RightEye bones from the gaze (for avatars without eyeLook shapes)")
    p.add_argument("--record", metavar="DIR", help="record the take (JSON lines + Live Link Face CSV) to DIR")
    p.add_argument("--grpc", metavar="HOST:PORT", help="serve the FaceBridge gRPC stream (Unreal plugin, "
                   "Omniverse) on HOST:PORT; binding beyond 127.0.0.1 needs --grpc-token")
    p.add_argument("--grpc-token", metavar="TOKEN", help="bearer token gRPC clients must send")
    p.add_argument("--grpc-tls-cert", metavar="PEM", help="TLS certificate for the gRPC server")
    p.add_argument("--grpc-tls-key", metavar="PEM", help="TLS private key for the gRPC server")
    p.add_argument("--no-calibration", action="store_true", help="ignore the subject's stored calibration")
    p.add_argument("--audio", metavar="mic|mic:N|sample|FILE", help="also drive the mouth from speech: a "
                   "microphone (`facebridge devices` lists them), the bundled sample voice, or an audio file, "
                   "played at real time")
    p.add_argument("--audio-only", action="store_true",
                   help="no camera: the audio (--audio) drives the mouth, everything else stays neutral")
    p.add_argument("--quiet", action="store_true", help="no live status line")
    p.set_defaults(func=run)


def open_sinks(args, control=None) -> list:
    sinks = []
    try:
        if args.llf and args.llf != "off":
            from bridge.sinks.livelinkface import LiveLinkFaceSink

            sinks.append(LiveLinkFaceSink(args.llf))
        if args.vmc and args.vmc != "off":
            from bridge.sinks.vmc import VmcSink

            sinks.append(VmcSink(args.vmc, bundle=not args.vmc_no_bundle, eye_bones=args.vmc_eye_bones,
                                 expressions=tuple(e.strip() for e in args.vmc_expressions.split(",") if e.strip())))
        if getattr(args, "record", None):
            from bridge.sinks.recorder import TakeRecorder

            sinks.append(TakeRecorder(args.record))
        if getattr(args, "grpc", None):
            from bridge.grpc.server import GrpcSink

            sinks.append(GrpcSink(args.grpc, token=args.grpc_token, tls_cert=args.grpc_tls_cert,
                                  tls_key=args.grpc_tls_key, control=control))
    except BaseException:
        for s in sinks:
            s.close()
        raise
    return sinks


class RunControl:
    """What the gRPC server may ask of the running bridge (status, calibrate, subjects)."""

    def __init__(self, args, source, pipeline) -> None:
        self.args, self.source, self.pipeline = args, source, pipeline
        self.runner = None
        self._calibration_frames: list | None = None
        self._calibration_done = threading.Event()
        self._lock = threading.Lock()

    def status(self) -> dict:
        stats = self.runner.stats if self.runner else None
        p50, p99 = stats.latency_percentiles() if stats else (0.0, 0.0)
        landmarker = getattr(self.pipeline, "landmarker", None)  # None while starting and in audio-only runs
        backend = landmarker.session.backend_name if landmarker is not None else self.args.backend
        return {"sources": [self.source.name] if self.source else [], "backends": [backend],
                "model_versions": getattr(self.pipeline, "model_versions", {}), "fps": stats.fps() if stats else 0.0,
                "latency_ms_p50": p50, "latency_ms_p99": p99, "subjects": self.subjects()}

    def subjects(self) -> list[str]:
        return [self.args.subject]

    def on_frame(self, frame) -> None:
        with self._lock:
            if self._calibration_frames is not None:
                self._calibration_frames.append(frame)
                if len(self._calibration_frames) >= 45:
                    self._calibration_done.set()

    def calibrate(self, subject: str) -> tuple[bool, str]:
        from bridge.calibration import CalibrationProfile

        if subject not in self.subjects():
            return False, f"unknown subject '{subject}'; known: {', '.join(self.subjects())}"
        if self.pipeline is None:
            return False, "the bridge is still starting; try again in a moment"
        if not hasattr(self.pipeline, "expression"):
            return False, "this run has no camera (--audio-only): there is no face to calibrate"
        with self._lock:
            self._calibration_frames, self._calibration_done = [], threading.Event()
        self.pipeline.profile = None  # measure the raw neutral
        done = self._calibration_done.wait(10.0)
        with self._lock:
            frames, self._calibration_frames = self._calibration_frames, None
        if not done:
            return False, "not enough frames arrived within 10 s; is the source running?"
        try:
            profile = CalibrationProfile.from_frames(subject, frames, self.pipeline.expression.identity)
        except FaceBridgeError as e:
            return False, str(e)
        path = profile.save()
        self.pipeline.profile = profile
        return True, f"calibrated from {profile.frames} frames; saved {path}"


def run(args) -> int:
    from bridge.calibration import CalibrationProfile
    from bridge.pipeline import FacePipeline
    from bridge.runtime.runner import BridgeRunner
    from bridge.sources import open_source

    if args.max_frames is not None and args.max_frames < 1:
        raise FaceBridgeError("--max-frames must be at least 1", "pass a positive number of frames")
    if args.audio_only and not args.audio:
        raise FaceBridgeError("--audio-only needs an audio input", "add --audio mic or --audio FILE.wav")
    # Open inputs and outputs first: a bad camera, file or address fails at once, before models load.
    audio = source = pipeline = profile = None
    sinks: list = []
    control = RunControl(args, None, None)
    try:
        if args.audio:  # lip-sync runs on its own thread; the video side only polls it
            from bridge.audio.run_audio import AudioFrameClock, AudioFusion, AudioOnlyPipeline, start_lipsync

            audio = start_lipsync(args.audio)  # CPU: 0.2 ms a hop, less than any GPU round trip
        source = AudioFrameClock(audio) if args.audio_only else open_source(args.source, realtime=not args.fast)
        control.source = source
        sinks = open_sinks(args, control)
        if args.audio_only:
            pipeline = AudioOnlyPipeline(audio, subject=args.subject)
        else:
            profile = None if args.no_calibration else CalibrationProfile.load(args.subject)
            pipeline = FacePipeline(pipeline_options(args), profile=profile)
        control.pipeline = pipeline
    except BaseException:
        for sink in sinks:
            sink.close()
        if source is not None:
            source.close()
        if audio is not None:
            audio.stop()
        raise
    fuse = (lambda step: AudioFusion(step, audio)) if audio is not None and not args.audio_only else (lambda step: step)
    two_stage = not args.audio_only and (args.stages == "2" or (args.stages == "auto" and (os.cpu_count() or 1) > 1))
    stages = [pipeline.track, fuse(pipeline.describe)] if two_stage else [fuse(pipeline.process)]
    if not args.quiet:
        outs = ", ".join(f"{s.name}" for s in sinks) or "no outputs"
        cal = f"calibration '{args.subject}'" if profile else "no calibration (run `facebridge calibrate`)"
        print(f"facebridge: {source.name} -> {outs}; {cal}", flush=True)
    runner = BridgeRunner(source, None, sinks, max_frames=args.max_frames, status=not args.quiet,
                          on_frame=control.on_frame, stages=stages)
    control.runner = runner
    try:
        stats = runner.run()
    finally:
        if audio is not None:
            audio.stop()
    for sink in sinks:
        s = sink.stats()
        if s.get("errors"):
            print(f"facebridge: {sink.name}: {s['errors']} sends failed (is the receiver running?)")
    print(f"facebridge: {stats.sent} frames sent, face found in {100 * stats.face_ratio():.0f}%, "
          f"{stats.dropped_capture + stats.dropped_send} dropped, {stats.bad_frames} bad")
    return 0
