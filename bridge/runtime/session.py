"""BridgeSession: the composition root of a running bridge. It builds, owns and closes the source, the face
pipeline, the audio lip-sync, the sinks and the control surface, in the order that lets bad input fail first
(inputs and outputs open before any model loads), and it is the only module that knows every concrete source and
sink. `open_sinks` is the one sink factory, shared with `facebridge replay`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from bridge.errors import FaceBridgeError
from bridge.pipeline import PipelineOptions
from bridge.runtime.control import RunControl
from bridge.runtime.runner import BridgeRunner
from bridge.runtime.stats import StatsSnapshot
from bridge.sinks.base import Sink

OFF = ("off", "none", "no", "")


def address_or_off(text: str | None) -> str | None:
    """An output address as given, or None when the user turned it off ('off', 'none', 'no')."""
    return None if text is None or text.strip().lower() in OFF else text


@dataclass(frozen=True)
class OutputConfig:
    """Where frames go. An address of None means that output is off."""

    llf: str | None = "127.0.0.1:11111"  # Live Link Face (Unreal) UDP target
    llf_subject: str | None = None  # send under this subject instead of the frame's (replay --subject)
    vmc: str | None = "127.0.0.1:39539"  # VMC/OSC receiver
    vmc_bundle: bool = True
    vmc_expressions: tuple[str, ...] = ("arkit",)
    vmc_eye_bones: bool = False
    record: str | None = None  # take directory
    grpc: str | None = None  # HOST:PORT of the gRPC server
    grpc_token: str | None = None
    grpc_tls_cert: str | None = None
    grpc_tls_key: str | None = None


def open_sinks(outputs: OutputConfig, control: RunControl | None = None) -> list[Sink]:
    """Every sink `outputs` turns on, opened now (a bad address or a used take directory fails here, at once)."""
    sinks: list[Sink] = []
    try:
        if outputs.llf:
            from bridge.sinks.livelinkface import LiveLinkFaceSink

            sinks.append(LiveLinkFaceSink(outputs.llf, subject=outputs.llf_subject))
        if outputs.vmc:
            from bridge.sinks.vmc import VmcSink

            sinks.append(VmcSink(outputs.vmc, bundle=outputs.vmc_bundle, eye_bones=outputs.vmc_eye_bones,
                                 expressions=outputs.vmc_expressions))
        if outputs.record:
            from bridge.sinks.recorder import TakeRecorder

            sinks.append(TakeRecorder(outputs.record))
        if outputs.grpc:
            from bridge.grpc.server import GrpcSink

            sinks.append(GrpcSink(outputs.grpc, token=outputs.grpc_token, tls_cert=outputs.grpc_tls_cert,
                                  tls_key=outputs.grpc_tls_key, control=control))
    except BaseException:
        close_all(sinks)
        raise
    return sinks


def close_all(sinks: list[Sink]) -> None:
    for sink in sinks:
        sink.close()


@dataclass(frozen=True)
class RunConfig:
    """Everything `facebridge run` was asked to do (built by bridge/commands/run.py from its arguments)."""

    source: str | None = None  # --source spec; None: camera 0 if there is one, else the sample
    fast: bool = False  # read file sources as fast as possible (every frame kept) instead of at their rate
    max_frames: int | None = None
    subject: str = "FaceBridge"
    pipeline: PipelineOptions = field(default_factory=PipelineOptions)
    stages: str = "auto"  # inference threads: "auto", "1" or "2"
    audio: str | None = None  # mic | mic:N | sample | FILE
    audio_only: bool = False
    calibration: bool = True  # apply the subject's stored calibration profile
    status_line: bool = True
    outputs: OutputConfig = field(default_factory=OutputConfig)


@dataclass(frozen=True)
class RunSummary:
    """What a finished run did: the statistics' last snapshot and each sink's counters."""

    stats: StatsSnapshot
    sinks: dict[str, dict]


class BridgeSession:
    """Open with `open()` (or `with`), then `run()` once; `close()` releases everything that was opened."""

    def __init__(self, config: RunConfig) -> None:
        if config.max_frames is not None and config.max_frames < 1:
            raise FaceBridgeError("--max-frames must be at least 1", "pass a positive number of frames")
        if config.audio_only and not config.audio:
            raise FaceBridgeError("--audio-only needs an audio input", "add --audio mic or --audio FILE.wav")
        self.config = config
        self.control = RunControl(config.subject, config.pipeline.backend)
        self.audio = self.source = self.pipeline = self.profile = None
        self.sinks: list[Sink] = []
        self.runner: BridgeRunner | None = None

    def __enter__(self) -> BridgeSession:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> BridgeSession:
        """Inputs and outputs first, so a bad camera, file or address fails at once, before models load."""
        config = self.config
        try:
            if config.audio:  # lip-sync runs on its own thread; the video side only polls it
                from bridge.audio.run_audio import start_lipsync

                self.audio = start_lipsync(config.audio)  # CPU: 0.2 ms a hop, less than any GPU round trip
            self.source = self._open_source()
            self.control.source = self.source
            self.sinks = open_sinks(config.outputs, self.control)
            self.pipeline = self._build_pipeline()
            self.control.pipeline = self.pipeline
        except BaseException:
            self.close()
            raise
        return self

    def _open_source(self):
        if self.config.audio_only:
            from bridge.audio.run_audio import AudioFrameClock

            return AudioFrameClock(self.audio)
        from bridge.sources import open_source

        return open_source(self.config.source, realtime=not self.config.fast)

    def _build_pipeline(self):
        config = self.config
        if config.audio_only:
            from bridge.audio.run_audio import AudioOnlyPipeline

            return AudioOnlyPipeline(self.audio, subject=config.subject)
        from bridge.calibration import CalibrationProfile
        from bridge.pipeline import FacePipeline

        self.profile = CalibrationProfile.load(config.subject) if config.calibration else None
        return FacePipeline(config.pipeline, profile=self.profile)

    def _stages(self) -> list:
        """The pipeline's steps, one thread each: track and describe on two or more cores, else one step."""
        config, pipeline = self.config, self.pipeline
        if self.audio is not None and not config.audio_only:
            from bridge.audio.run_audio import AudioFusion

            fuse = lambda step: AudioFusion(step, self.audio)
        else:
            fuse = lambda step: step
        two = not config.audio_only and (config.stages == "2" or (config.stages == "auto" and
                                                                   (os.cpu_count() or 1) > 1))
        return [pipeline.track, fuse(pipeline.describe)] if two else [fuse(pipeline.process)]

    def describe(self) -> str:
        """One line: where frames come from and go, and the calibration in use."""
        outs = ", ".join(s.name for s in self.sinks) or "no outputs"
        subject = self.config.subject
        cal = f"calibration '{subject}'" if self.profile else "no calibration (run `facebridge calibrate`)"
        return f"{self.source.name} -> {outs}; {cal}"

    def run(self) -> RunSummary:
        """Stream until the source ends, --max-frames, Ctrl-C or SIGTERM; the sinks and source close at the end."""
        if self.pipeline is None:
            self.open()
        self.runner = BridgeRunner(self.source, None, self.sinks, max_frames=self.config.max_frames,
                                   status=self.config.status_line, on_frame=self.control.on_frame,
                                   stages=self._stages())
        self.control.stats = self.runner.stats
        try:
            stats = self.runner.run()
        finally:
            self.close()
        return RunSummary(stats=stats.snapshot(), sinks={s.name: s.stats() for s in self.sinks})

    def close(self) -> None:
        """Close what is open (idempotent; the runner closes sinks and source itself when it ran)."""
        if self.runner is None:
            close_all(self.sinks)
            if self.source is not None:
                self.source.close()
        if self.audio is not None:
            self.audio.stop()
            self.audio = None
