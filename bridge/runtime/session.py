"""BridgeSession: the composition root of a running bridge. It builds, owns and closes the source, the face
pipeline, the audio lip-sync, the sinks, the control surface and the monitor, in the order that lets bad input
fail first (the monitor's port, inputs and outputs open before any model loads), and it is the only module that
knows every concrete source and sink. `open_sinks` is the one sink factory, shared with `facebridge replay`.

The steps it hands the runner are the pipeline's, wrapped: the monitor's image tap around the first and the
output guard around the last. One `ModelSwapper` (runtime/swap.py) serves the run: newly active releases and the
guard's recreated sessions are built on its thread and taken by the stage threads between two frames.

Recording a file keeps every frame: a video or audio file given with `--record` runs lossless (paced at its rate,
but a busy stage makes the file wait instead of dropping frames), so a take holds the whole file. A camera or
microphone is never made to wait: it drops the oldest frame, and the run's summary says how many and why.

Imports are at the top but for the parts only some runs use that cost a measured time to import on top of this
module (2-core VM): the monitor (aiohttp and the page, 0.7 s), the gRPC sink (0.24 s), the audio path (80 ms), the
OSC remote control (80 ms), `--learn` (35 ms) and each model's backend choice for the start line (60 ms; a face
run loads it with its models anyway).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time

from bridge.audio.learn_recorder import LearnRecorder
from bridge.audio.learn_store import LearnStore
from bridge.audio.run_audio import AudioFrameClock, AudioFusion, AudioOnlyPipeline
from bridge.calibration import CalibrationProfile
from bridge.errors import FaceBridgeError
from bridge.mapping import load_mapping, parse_mapping
from bridge.monitor.feed import LiveFeed
from bridge.multiface import MultiFacePipeline, subject_names
from bridge.pipeline import FacePipeline, PipelineOptions
from bridge.runtime.control import RunControl
from bridge.runtime.faces import vmc_targets
from bridge.runtime.fallback import ReleaseFallback
from bridge.runtime.gc_pauses import settle as settle_heap
from bridge.runtime.guard import OutputGuard
from bridge.runtime.options import (  # noqa: F401 (address_or_off, llf_targets re-exported)
    DEFAULT_MONITOR,
    OutputConfig,
    RunConfig,
    address_or_off,
    check_run_config,
    check_subject,
    checked_adapter,
    llf_targets,
    update_state_dir,
)
from bridge.runtime.osc_remote import DEFAULT_PORT as OSC_REMOTE_PORT
from bridge.runtime.osc_remote import OscRemote
from bridge.runtime.pipeline_protocol import Pipeline
from bridge.runtime.recording import RecordSwitch
from bridge.runtime.recreate import SessionRecreator
from bridge.runtime.releases import ReleaseWatch
from bridge.runtime.remote import RemotePipeline
from bridge.runtime.runner import BridgeRunner, sink_labels
from bridge.runtime.summary import RunSummary, summarise  # noqa: F401 (re-exported)
from bridge.runtime.swap import ModelSwapper
from bridge.runtime.timecode_clock import open_clock
from bridge.runtime.tuning import Tuning
from bridge.sinks.base import Sink
from bridge.sinks.ifacialmocap import IFacialMocapSink
from bridge.sinks.livelinkface import LiveLinkFaceSink
from bridge.sinks.recorder import TakeRecorder
from bridge.sinks.udp import parse_host_port
from bridge.sinks.vmc import VmcSink
from bridge.sources import open_source
from bridge.sources.base import SourceMode
from bridge.stats import RunStats

log = logging.getLogger(__name__)
INITIAL_RELEASE_WAIT_S = 30.0  # longest wait for an installed lip-sync release before the audio plays anyway


def open_sinks(outputs: OutputConfig, control: RunControl | None = None) -> list[Sink]:
    """Every sink `outputs` turns on, opened now (a bad address or a used take directory fails here, at once)."""
    sinks: list[Sink] = []
    try:
        llf = (outputs.llf,) if isinstance(outputs.llf, str) else outputs.llf or ()
        for address in llf:
            sinks.append(LiveLinkFaceSink(address, subject=outputs.llf_subject))
        if outputs.vmc:
            for subject, address in vmc_targets(outputs.vmc, list(outputs.subjects) or [None]):
                sinks.append(VmcSink(address, bundle=outputs.vmc_bundle, eye_bones=outputs.vmc_eye_bones,
                                     expressions=outputs.vmc_expressions))
                sinks[-1].only_subject = subject
        if outputs.ifm:
            sinks.append(IFacialMocapSink(outputs.ifm))
        if outputs.record:
            sinks.append(TakeRecorder(outputs.record))
        if outputs.grpc:
            # loaded with --grpc (off by default): gRPC and its generated code cost a run that sends none
            from bridge.grpc.server import GrpcSink

            sinks.append(GrpcSink(outputs.grpc, token=outputs.grpc_token, tls_cert=outputs.grpc_tls_cert,
                                  tls_key=outputs.grpc_tls_key, control=control))
    except BaseException:
        close_all(sinks)
        raise
    return sinks


def close_all(sinks: list[Sink]) -> None:
    """Close every sink (a take is finalised); one that fails to close is warned about and the others still close."""
    for sink, label in zip(sinks, sink_labels(sinks)):
        try:
            sink.close()
        except Exception as e:  # noqa: BLE001
            log.warning("%s did not close cleanly: %s", label, e)


class BridgeSession:
    """Open with `open()` (or `with`), then `run()` once; `close()` releases everything that was opened."""

    def __init__(self, config: RunConfig) -> None:
        check_run_config(config)
        self.subjects = subject_names(config.subject, config.faces)
        for subject in self.subjects:
            check_subject(subject)
        config.pipeline.check()
        self.file_mapping = None
        if config.mapping:
            self.file_mapping = load_mapping(config.mapping)
        self.config = config
        self.learn = None
        self.tuning = None
        self.osc_remote = None
        self.clock = None
        self.stats = RunStats()  # the run's one statistics object: status line, gRPC, monitor, metrics
        self.stats.audio_only = config.audio_only
        self.control = RunControl(self.subjects[0], config.pipeline.backend)
        self.control.all_subjects = list(self.subjects)
        self.control.stats = self.stats
        self.audio = self.source = self.profile = self.monitor = self.feed = None
        self.pipeline: Pipeline | None = None  # asked only what the protocol names
        self.audio_duration: float | None = None
        self.recording: RecordSwitch | None = None
        self.recreator: SessionRecreator | None = None
        self.sinks: list[Sink] = []
        self.runner: BridgeRunner | None = None
        self._io_closed = False  # source and sinks closed
        self.swapper = self.release_watch = None

    def __enter__(self) -> BridgeSession:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> BridgeSession:
        """Inputs and outputs first, so a bad camera, file or address fails at once, before models load."""
        config = self.config
        try:
            # the monitor first: its port fails at once, and its start (about a second of imports) never eats into
            # a live audio input that is already playing
            self.monitor = self._open_monitor()
            self.clock = open_clock(config.timecode_source, config.timecode_rate, config.ltc_input, config.ntp_server)
            if not config.audio_only:
                self.source = self._open_source()
            if config.audio:  # lip-sync on its own thread, polled by the video side; --fast: in step with a file's
                from bridge.audio.run_audio import start_lipsync  # frames (every frame gets its own instant)

                adapter = checked_adapter(config.adapter, config.adapter_sha256) if config.adapter else None
                # the sample voice loops with the sample clip (which loops); alone, the run ends with it
                loop = config.audio == "sample" and not config.audio_only and config.source in (None, "sample")
                # in step with a file's frames when every frame is kept (--fast; a video file being recorded)
                in_step = (config.fast if config.audio_only else
                           not self.source.live and (config.fast or bool(config.outputs.record)))
                # opened now, played once frames flow (CPU: 0.2 ms a hop, less than any GPU round trip)
                self.audio = start_lipsync(config.audio, adapter=adapter, loop=loop, start=False, in_step=in_step)
            if config.learn is not None:  # consented: only while asked, into the owner-only, bounded store
                self.learn = LearnRecorder(LearnStore(config.learn or None), keep_audio=config.learn_audio)
                self.audio.stream.feature_listener = self.learn.on_audio
            if config.audio_only:
                self.source = self._open_source()
            self.control.source = self.source
            self.tuning = Tuning(default=self.file_mapping, head_dead_zone=self.config.head_dead_zone)
            self.control.tuning = self.tuning  # the monitor page's tuning panel (also remote and audio-only runs)
            subjects = tuple(self.subjects) if len(self.subjects) > 1 else ()
            self.sinks = open_sinks(dataclasses.replace(config.outputs, record=None, subjects=subjects), self.control)
            self.sinks.append(self._open_recording())
            self.osc_remote = self._open_osc_remote()
            self.stats.attach_sinks(self.sinks)
            self.pipeline = self._build_pipeline()
            self.control.pipeline = self.pipeline
            self._start_swapper()
            self._follow_updates()
            self.stats.set_models_loaded()
            if self.monitor is not None:
                self.monitor.set_info(backend=self.control.status()["backends"][0])
        except BaseException:
            self.close()
            raise
        return self

    def _open_recording(self) -> RecordSwitch:
        """The take recorder, on from the start with --record DIR, else off until the monitor page starts it."""
        self.recording = RecordSwitch(TakeRecorder, self.config.takes_dir, self.subjects[0])
        if len(self.subjects) > 1:
            self.recording.only_subject = self.subjects[0]  # a take holds one subject: the first face
        self.control.recording = self.recording
        if self.config.outputs.record:
            self.recording.begin(self.config.outputs.record)
        return self.recording

    def _open_osc_remote(self):
        """The Live Link Face style OSC remote control (record start/stop with slate and take), when asked."""
        spec = self.config.osc_remote
        if not spec:
            return None

        spec = spec.strip()
        host, port = ("127.0.0.1", int(spec)) if spec.isdigit() else parse_host_port(spec, OSC_REMOTE_PORT,
                                                                                       "--osc-remote")
        return OscRemote(host, port, self.recording, fps=lambda: float(self.source.fps), allow=self.config.osc_allow)

    def _open_monitor(self):
        config = self.config
        if not config.monitor:
            return None
        # loaded when the monitor is on: aiohttp and prometheus_client cost about 0.3 s to import, which `replay`
        # and `run --monitor off` skip
        from bridge.monitor.server import MonitorServer

        self.feed = LiveFeed()
        return MonitorServer(config.monitor, self.stats, control=self.control, feed=self.feed,
                             token=config.monitor_token, tls_cert=config.monitor_tls_cert,
                             tls_key=config.monitor_tls_key, info={"subject": config.subject},
                             fallback=config.monitor == DEFAULT_MONITOR)

    def _open_source(self):
        if self.config.audio_only:
            if self.config.camera_size or self.config.camera_fps or self.config.mirror:
                raise FaceBridgeError("--camera-size, --camera-fps and --mirror need a camera",
                                      "leave them out with --audio-only")
            return AudioFrameClock(self.audio)
        config = self.config
        return open_source(config.source, realtime=not config.fast, size=config.camera_size, fps=config.camera_fps,
                           mirror=config.mirror)

    def _build_pipeline(self) -> Pipeline:
        config = self.config
        if config.audio_only:
            return AudioOnlyPipeline(self.audio.stream, subject=config.subject, live=self.audio.live, stats=self.stats)
        if config.remote:  # the server describes with its own calibration profiles
            return RemotePipeline(config.remote, subject=config.subject, token=config.remote_token,
                                  tls_ca=config.remote_tls_ca)
        profiles = [CalibrationProfile.load(s) if config.calibration else None for s in self.subjects]
        self.profile = profiles[0]
        options = self._open_tuning(profiles)
        if len(self.subjects) > 1:
            return MultiFacePipeline(options, self.subjects, profiles)
        return FacePipeline(options, profile=self.profile)

    def _open_tuning(self, profiles: list) -> PipelineOptions:
        """Each subject's mapping (--mapping FILE for all, else the one stored in their profile) and the pipeline
        options with the mapping's smoothing per region under the --smoothing-REGION options given."""
        mappings = {}
        if self.file_mapping is None:
            for subject, profile in zip(self.subjects, profiles):
                if profile is not None and profile.mapping:
                    mappings[subject] = parse_mapping(profile.mapping, f"of {subject}'s profile")
        self.tuning.mappings.update(mappings)
        first = self.tuning.mapping(self.subjects[0])
        regions = {**(first.smoothing if first else {}), **self.config.pipeline.region_smoothing}
        return dataclasses.replace(self.config.pipeline, region_smoothing=regions)

    def _start_swapper(self) -> None:
        """The run's one model swapper: the output guard recreates sessions through it (runtime/recreate.py),
        and the update watch swaps new releases in through it."""
        self.swapper = ModelSwapper(report=lambda line: print(f"facebridge: {line}", file=sys.stderr, flush=True),
                                    on_event=self._swap_event)
        self.pipeline.use_swapper(self.swapper)
        self.recreator = SessionRecreator(self.pipeline, self.swapper, self.stats)

    def _swap_event(self, event) -> None:
        self.stats.swap_event(event)
        rolled = self.stats.rolled_back.get(event.model, 0)
        if event.release > 0 and not (event.ok and event.release < rolled):  # a signed release (recreations of the
            # model in use, and the one a rollback went back to, say nothing here)
            self.stats.set_update_status("installed" if event.ok else "failed")  # monitor/metrics.py's states
        if self.recreator is not None:
            self.recreator.on_event(event)

    def _follow_updates(self) -> None:
        """Watch the update store and swap newly active releases in between two frames (runtime/swap.py)."""
        state = update_state_dir(self.config.updates)
        if state is None:
            return
        models = list(self.pipeline.swappable_models())
        if self.audio is not None and self.config.adapter is None:  # a local --adapter trial is not replaced
            self.audio.stream.swapper = self.swapper
            models.append("lipsync")
        options = self.config.pipeline
        self.release_watch = ReleaseWatch(state, models, self.swapper, backend=options.backend,
                                          cpu_precision=options.cpu_precision, on_release=self.stats.set_release)
        if self.recreator is not None:  # a release still failing after its session was recreated is rolled back
            self.recreator.fallback = ReleaseFallback(
                self.release_watch, lambda model, release, why: self.stats.release_rolled_back(model, release),
                report=lambda line: print(f"facebridge: {line}", file=sys.stderr, flush=True))

    def _stages(self) -> list:
        """The pipeline's steps, one thread each: track and describe on two or more cores, else one step."""
        config, pipeline = self.config, self.pipeline
        if self.audio is not None and not config.audio_only:
            fuse = lambda step: AudioFusion(step, self.audio.stream, self.stats, learn=self.learn)
        else:
            fuse = lambda step: step
        two = pipeline.overlaps() and (config.stages == "2" or (config.stages == "auto" and (os.cpu_count() or 1) > 1))
        # the mapping after calibration and fusion, inside the guard (a frame it repeats is never mapped twice)
        tune = lambda step: self.clock.wrap(self.tuning.wrap(step))  # noqa: E731 - then the timecode clock's stamp
        guard = lambda step, reset: OutputGuard(step, stats=self.stats, recreate=self.recreator, reset=reset)
        # several faces: each its own guard, the audio mouth on the first only
        if pipeline.wrap_faces(lambda k, step, reset: guard(tune(fuse(step) if k == 0 else step), reset)):
            steps = [pipeline.track, pipeline.describe] if two else [pipeline.process]
        else:
            steps = [pipeline.track, tune(fuse(pipeline.describe))] if two else [tune(fuse(pipeline.process))]
            if pipeline.guarded():  # the guard resets and recreates local model sessions (not --remote's)
                steps[-1] = guard(steps[-1], pipeline.reset_description)
        if self.feed is not None:
            steps[0] = self.feed.tap(steps[0])
        return steps

    def describe(self, verbose: bool = False) -> list[str]:
        """The start lines: where frames come from and go (and the monitor's address), then what tracks them and
        the calibration in use. Two short lines; `verbose` (-v) adds each model's backend and why."""
        outs = ", ".join(s.label() for s in self.sinks if s is not self.recording or self.recording.recording)
        lossless = ", every frame kept" if self._lossless() and self.source.mode is SourceMode.PACED else ""
        source = self.source.fallback or self.source.name  # plain `facebridge run` without a camera says so
        monitor = f"; monitor {self.monitor.url}" if self.monitor is not None else ""
        if self.osc_remote is not None:
            monitor += "; OSC remote control on {}:{}".format(*self.osc_remote.address)
        if self.clock is not None and (self.clock.rate is not None or self.clock.offset or
                                       self.config.timecode_source != "system"):
            monitor += f"; {self.clock.describe()}"
        first = f"{source}{lossless} -> {outs or 'no outputs'}{monitor}"
        subject = ", ".join(self.subjects)
        cal = f"calibration '{subject}'" if self.profile else "no calibration (run `facebridge calibrate`)"
        if len(self.subjects) > 1:
            cal = f"up to {len(self.subjects)} faces as {subject}; " + cal
        learn = (f"; learning into {self.learn.store.root} (owner-only, at most {self.learn.store.max_bytes >> 20} MB;"
                 " `fedagent data clear` deletes it)" if self.learn is not None else "")
        if self.config.remote:
            cal = f"tracked by facebridge serve at {self.config.remote}"
        if self.config.audio_only:
            cal = "audio only: the voice drives the mouth, the rest of the face stays neutral"
        if self.config.mapping:
            cal += f"; mapping {self.config.mapping}"
        elif self.tuning is not None and self.tuning.mappings:
            cal += "; the profile's mapping"
        summary = self.pipeline.detector_summary(verbose)  # which face detector runs, and when
        detector = f"{summary}; " if summary else ""
        return [first, f"{self._backend(verbose)}{detector}{cal}{learn}"]

    def generated_tokens(self) -> list[str]:
        """The tokens `auto` made for this run's listeners, one line each, to be printed once."""
        lines = []
        if self.monitor is not None and self.monitor.generated_token:
            lines.append(f"monitor token (made for this run): {self.monitor.token}; open "
                         f"{self.monitor.url}?token={self.monitor.token}")
        lines += [f"gRPC token (made for this run): {s.token}; clients send 'authorization: Bearer {s.token}'"
                  for s in self.sinks if s.generated_token]
        return lines

    def grpc_address(self) -> str:
        """Where the gRPC stream listens (the port the system chose for HOST:0), or '' without one."""
        return next((f"gRPC stream on {s.address}" for s in self.sinks if s.name == "grpc"), "")

    def _backend(self, verbose: bool = False) -> str:
        """'litert, onnxruntime f32; ' (the backends the face models run on, the precision they compute in), '' for
        audio-only; `verbose`: each model's backend and why, and the landmark path and why."""
        models = self.pipeline.face_models()
        if models is None:
            return ""
        from bridge.engines.fastest import CHOSEN, chosen_summary  # --backend auto on a CPU: each model's choice

        precision, path = models.precision, models.landmark_path
        if not verbose:
            backends = sorted({c.backend for c in CHOSEN.values()}) or [models.backend]
            return f"{'+'.join(backends)} {precision or 'f32'} (-v: why), landmarks {path}; "
        landmarks = f"landmarks {path} ({models.landmark_reason}); "  # after the backend
        chosen = chosen_summary()
        if chosen:  # f32 unless --cpu-precision bf16 took (each model's own precision: `facebridge -v`)
            return f"{chosen}{'' if precision in (None, 'f32') else f'; face mesh in {precision}'}; {landmarks}"
        return f"{models.backend}{' ' + precision if precision else ''}; {landmarks}"

    def _lossless(self) -> bool:
        """Keep every frame: a file read as fast as it goes (--fast), or a file being recorded (--record)."""
        mode = self.source.mode
        return mode is SourceMode.FAST or (mode is SourceMode.PACED and bool(self.config.outputs.record))

    def run(self) -> RunSummary:
        """Stream until the source ends, --max-frames, Ctrl-C or SIGTERM; the sinks and source close at the end."""
        if self.pipeline is None:
            self.open()
        lossless = self._lossless()
        self.runner = BridgeRunner(self.source, self._stages(), self.sinks, max_frames=self.config.max_frames,
                                   status=self.config.status_line, on_frame=self._on_frame, stats=self.stats,
                                   lossless=lossless, after_frame=self.pipeline.run_deferred)
        self.control.stats = self.stats
        self.control.runner = self.runner
        if self.release_watch is not None:
            self.release_watch.start()
        if self.audio is not None:
            self._initial_lipsync_release()
            self.audio.start()
        try:
            self.clock.wait_locked()  # LTC found (or a one-line error) before the first frame is stamped
            # the start-up's heap (about 260,000 objects: 110-150 ms a full collection on the 2-core EPYC, every
            # thread stalled behind it: Live Link Face gaps of 200-370 ms in the worst-day soak) frozen out of
            # the collector's reach, as serve does (runtime/gc_pauses.py)
            settle_heap()
            self.runner.run()
        finally:
            self.close()
        return summarise(self.stats.snapshot(), self.sinks, sink_labels(self.sinks), self.source,
                         mode=self.source.mode, lossless=lossless, max_frames=self.config.max_frames,
                         frame_rate=float(self.source.fps), audio_only=self.config.audio_only,
                         audio_s=self.audio_duration if self.config.audio_only else None,
                         interrupted=self.runner.interrupted)

    def _on_frame(self, frame) -> None:
        self.control.on_frame(frame)
        if self.feed is not None:
            self.feed.on_frame(frame)

    def _initial_lipsync_release(self) -> None:
        """An installed lip-sync release serves from the first hop: the audio starts playing once the release watch
        has built (or refused) it, at most INITIAL_RELEASE_WAIT_S later."""
        if self.swapper is None or not self.stats.snapshot().releases.get("lipsync"):
            return
        deadline = time.monotonic() + INITIAL_RELEASE_WAIT_S
        while time.monotonic() < deadline and not self.swapper.settled("lipsync"):
            time.sleep(0.02)

    def close(self) -> None:
        """Close what is open (idempotent), all but what a thread the runner left behind still uses (a source whose
        read is blocked, a sink still sending)."""
        if not self._io_closed:  # the summary still reads the closed sinks' reports
            self._io_closed = True
            busy = self.runner.left_behind() if self.runner is not None else []
            close_all([s for s in self.sinks if s not in busy])
            if self.source is not None and self.source not in busy:
                try:
                    self.source.close()
                except Exception as e:  # noqa: BLE001 - the run's outcome stands; the source's fault is said
                    log.warning("the source did not close cleanly: %s", e)
        if self.osc_remote is not None:
            self.osc_remote.close()
            self.osc_remote = None
        if self.clock is not None:
            self.clock.close()
        if self.release_watch is not None:
            self.release_watch.stop()
        if self.swapper is not None:
            self.swapper.close()
        if self.audio is not None:
            self.audio_duration = self.audio.duration_s
            self.audio.stop()
            self.audio = None
        if self.learn is not None:
            self.learn.close()
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None
