"""Streaming audio lip-sync: log-mel frames -> causal GRU (+ low-rank adapter) -> visemes and ARKit mouth weights.

`LipSyncModel` steps the shipped ONNX model (bridge/audio/lipsync.onnx, explicit recurrent state in and out).
`LipSyncStream` runs it on a background thread over an AudioSource; the video pipeline only ever calls
`latest()` or `at(t)`, which never block, so a stalled microphone or a broken file cannot hold up video frames.
`at(t)` answers with the result nearest the instant `t` among the last seconds (recent.py): a video frame asks for
its own capture instant, so a frame that waited in a busy pipeline still meets the mouth of its own moment.
A file whose frames are all kept (`--fast`, or a video file being recorded) is followed in step instead:
`result_at(t)` reads it up to media time t on the caller's thread, so what a frame gets does not depend on how
busy the machine is.
`analyze()` runs a whole recording offline (tests, benchmarks).

Timing: the model outputs frame t - LOOKAHEAD after seeing frame t, so each result describes the instant
52.5 ms (4 hops + half a window) before the newest audio it used. Results are stamped with that instant's
capture time, on the same clocks as video frames.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bridge.audio import features
from bridge.audio.adapter import adapter_digest, load_adapter, model_bytes_with_adapter, save_adapter  # noqa: F401
from bridge.audio.recent import RecentResults
from bridge.audio.sources import AudioSource
from bridge.audio.vad import CHUNK as VAD_WINDOW
from bridge.audio.vad import SileroVad, shipped_model
from bridge.audio.visemes import MOUTH_ARKIT_INDICES, MOUTH_CHANNELS
from bridge.engines import create_session
from bridge.errors import ModelError
from bridge.frame import NUM_BLENDSHAPES, VISEME_NAMES
from bridge.models.registry import default_registry

log = logging.getLogger(__name__)

MOUTH_MASK = np.zeros(NUM_BLENDSHAPES, dtype=bool)
MOUTH_MASK[MOUTH_ARKIT_INDICES] = True


@dataclass
class LipSyncResult:
    visemes: np.ndarray  # (15,) probabilities in VISEME_NAMES order
    blendshapes: np.ndarray  # (52,) ARKit order; only MOUTH_MASK entries are set, the rest are 0
    mouth_mask: np.ndarray  # (52,) bool: which blendshapes audio drives
    voice_activity: float  # 0..1 speech probability (Silero VAD)
    t_capture: float  # wall-clock seconds of the audio instant described
    t_capture_mono: float  # time.perf_counter() of that instant
    latency_ms: float  # from that instant's capture to this result being published (0 if read ahead)
    model_version: str = ""  # the lip-sync model (base + adapter) that made this result
    t_media: float = 0.0  # seconds on the audio's own timeline (position in the file; since the start for a mic)

    @property
    def viseme(self) -> str:
        return VISEME_NAMES[int(np.argmax(self.visemes))]


class LipSyncModel:
    """Steps the ONNX model frame by frame, keeping its recurrent state between calls.

    `adapter` replaces the named low-rank adapter initializers (adapter.A / adapter.B) at load time, so a
    federated update needs no new ONNX file."""

    def __init__(self, backend: str = "onnxruntime", adapter: dict[str, np.ndarray] | str | Path | None = None,
                 threads: int = 1, model_path: Path | None = None, version: str | None = None):
        """`model_path`: a verified replacement of the shipped ONNX file (a signed release of kind "model");
        `version`: what FaceFrame.model_versions names this model (default: derived from the files)."""
        path, self.manifest = shipped_model("lipsync")
        if model_path is not None:
            path = Path(model_path)
        elif adapter is None:  # a signed release installed by `fedagent update install` (hash-verified), if any

            active = default_registry().active("lipsync")
            if active.adapter_path is not None and backend not in ("onnxruntime", "auto"):
                log.warning("installed lip-sync release %d runs on ONNX Runtime only; %s runs the shipped adapter",
                            active.release, backend)
            else:
                path, adapter = active.model_path, active.adapter_path
        self.lookahead = int(self.manifest["lookahead_frames"])
        self.state_shape = tuple(self.manifest["inputs"]["state"])
        # a model with running normalisation in its graph takes at most this many frames a call
        self.max_frames = int(self.manifest.get("max_frames_per_call") or 0)
        if adapter is None:
            self._session = create_session(path, backend=backend, threads=threads)
            self.version = self.manifest["sha256"][:12]  # what FaceFrame.model_versions["lipsync"] says
        else:
            weights = load_adapter(adapter) if isinstance(adapter, (str, Path)) else adapter
            self._session = self._session_with_adapter(path, weights, threads, backend)
            self.version = f"adapter-{adapter_digest(weights)[:12]}"
        if version is not None:
            self.version = version
        self.reset()

    def _session_with_adapter(self, path, adapter, threads, backend):
        if backend not in ("onnxruntime", "auto"):
            raise ModelError(f"adapter override is not implemented for backend {backend!r}",
                             "use the onnxruntime backend or bake the adapter into the ONNX file")
        weights = adapter
        expected = {k: tuple(v) for k, v in self.manifest["adapter_initializers"].items()}
        for name, shape in expected.items():
            got = tuple(np.shape(weights[name])) if name in weights else "missing"
            if got != shape:
                raise ModelError(f"lip-sync adapter tensor {name} has shape {got}, expected {shape}",
                                 "use an adapter trained for this model version")
        return _AdapterSession(path, {n: weights[n] for n in expected}, threads)

    def reset(self) -> None:
        self._state = np.zeros(self.state_shape, dtype=np.float32)

    def run_raw(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One stateless call of the ONNX graph (mel and state given): the reference check of a release."""
        return self._session.run(feeds)

    def step(self, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(T, 40) new log-mel frames -> (T, 15) viseme probabilities, (T, 19) mouth weights, each row
        describing the frame `lookahead` frames before the matching input row. Longer input than the model's
        `max_frames` a call is stepped in parts, with the state carried: the same as streaming it."""
        if self.max_frames and len(mel) > self.max_frames:
            parts = [self.step(mel[i:i + self.max_frames]) for i in range(0, len(mel), self.max_frames)]
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        out = self._session.run({"mel": np.ascontiguousarray(mel[None], np.float32), "state": self._state})
        self._state = out["state_out"]
        return out["visemes"][0], out["mouth"][0]


class _AdapterSession:
    """ONNX Runtime session whose adapter initializers are overridden at load (SessionOptions.add_initializer)."""

    backend_name = "onnxruntime"

    def __init__(self, path: Path, weights: dict[str, np.ndarray], threads: int):
        # import cost: ONNX Runtime (about 0.13 s) loads where a session opens, not for the adapter file helpers
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # ORT keeps only a pointer to these buffers: they must live as long as the session
        self._values = {n: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(w, dtype=np.float32))
                        for n, w in weights.items()}
        for name, value in self._values.items():
            opts.add_initializer(name, value)
        self._session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self._output_names = [o.name for o in self._session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self._output_names, self._session.run(self._output_names, feeds)))


def analyze(pcm: np.ndarray, model: LipSyncModel | None = None, vad: bool = True) -> dict:
    """Offline: 16 kHz mono -> per 10 ms frame arrays aligned to frame times (row t describes frame t).
    Keys: times (s), visemes (T,15), mouth (T,19), voice_activity (T,)."""
    model = model or LipSyncModel()
    model.reset()
    mel = features.log_mel(pcm)
    pad = np.full((model.lookahead, features.N_MELS), np.log(features.LOG_FLOOR), np.float32)
    vis, mouth = model.step(np.concatenate([mel, pad]))
    vis, mouth = vis[model.lookahead:], mouth[model.lookahead:]
    times = features.frame_center_s(np.arange(len(mel)))
    activity = np.ones(len(mel), np.float32)
    if vad:
        probs = np.array(SileroVad().push(pcm) or [0.0], np.float32)
        chunk_of_frame = np.minimum((times * features.SAMPLE_RATE // 512).astype(int), len(probs) - 1)
        activity = probs[chunk_of_frame]
    return {"times": times, "visemes": vis, "mouth": mouth, "voice_activity": activity}


class _Clock:
    """Maps a sample index of the stream to capture times, one anchor per received chunk (so gaps and
    dropouts between chunks are handled)."""

    def __init__(self):
        self._anchors: collections.deque = collections.deque(maxlen=256)  # (first sample, wall, mono)

    def add(self, first_sample: int, wall: float, mono: float) -> None:
        self._anchors.append((first_sample, wall, mono))

    def at(self, sample: float) -> tuple[float, float]:
        best = self._anchors[0]
        for anchor in reversed(self._anchors):
            if anchor[0] <= sample:
                best = anchor
                break
        dt = (sample - best[0]) / features.SAMPLE_RATE
        return best[1] + dt, best[2] + dt


class VoiceGate:
    """Turns the VAD probability into a 0..1 gain for the mouth: opens at once, closes after a hold time,
    so the lip model is not cut mid-word but background noise cannot flap the jaw."""

    def __init__(self, low: float = 0.2, high: float = 0.5, hold_s: float = 0.25):
        self.low, self.high, self.hold_s = low, high, hold_s
        self._last_speech = -1e9

    def __call__(self, prob: float, now: float) -> float:
        if prob >= self.high:
            self._last_speech = now
        raw = float(np.clip((prob - self.low) / (self.high - self.low), 0.0, 1.0))
        held = now - self._last_speech <= self.hold_s
        return 1.0 if held else raw


class LipSyncStream:
    """Background lip-sync over an AudioSource: `start(source)`, then poll `latest()` or `at(t)`; `stop()` ends it.
    In step with the caller instead: `follow(source)`, then `result_at(t_media)` for each frame."""

    def __init__(self, backend: str = "onnxruntime", adapter=None, use_vad: bool = True, history: int = 0):
        self.model = LipSyncModel(backend=backend, adapter=adapter)
        self.model_version = self.model.version
        self.swapper = None  # a runtime.swap.ModelSwapper: a new model is taken between two hops, never waited for
        self.vad = SileroVad(backend=backend) if use_vad else None
        self.gate = VoiceGate()
        self._latest: LipSyncResult | None = None
        self._recent = RecentResults()  # the last seconds of results, by instant (`at`) or media time (in step)
        self.t_start_mono: float | None = None  # capture time of the first audio sample (set by the reader)
        self.history: collections.deque | None = collections.deque(maxlen=history) if history else None
        self.error: str | None = None
        self.hops = 0
        self.compute_s = 0.0
        # on_audio(mel (T, 40), t_mono (T,), first frame index, pcm chunk, its first sample index), called on this
        # stream's thread for every chunk (facebridge run --learn); an error in it is logged and never stops lip-sync
        self.feature_listener = None
        self._thread: threading.Thread | None = None
        self._source: AudioSource | None = None
        self._chunks = None  # in step: the source's iterator; None once it has ended
        self._step_lock = threading.Lock()  # in step: the frame clock and the pipeline may both ask
        self._stop = threading.Event()

    # -- caller side (never blocks) --------------------------------------------------------------------
    def latest(self) -> LipSyncResult | None:
        return self._latest

    def at(self, t_mono: float) -> LipSyncResult | None:
        """The recent result nearest `t_mono`, None before the first (bridge/audio/recent.py)."""
        return self._recent.at(t_mono)

    def ended_before(self, t_mono: float | None = None, t_media: float | None = None) -> bool:
        """The stream has ended and its last result describes an instant before `t_mono` (or media time
        `t_media`, in step)."""
        newest = self._latest
        if not self.started or self.running:
            return False
        if newest is None:
            return True
        return newest.t_media < t_media if t_media is not None else newest.t_capture_mono < t_mono

    @property
    def in_step(self) -> bool:
        return self._thread is None and self._source is not None

    @property
    def running(self) -> bool:
        if self.in_step:
            return self._chunks is not None
        return self._thread is not None and self._thread.is_alive()

    @property
    def started(self) -> bool:
        return self._source is not None

    def start(self, source: AudioSource) -> LipSyncStream:
        if self.running:
            raise RuntimeError("LipSyncStream already started")
        self._source = source
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="lipsync", daemon=True)
        self._thread.start()
        return self

    def follow(self, source: AudioSource) -> LipSyncStream:
        """No thread: `result_at(t)` reads `source` (a file read as fast as possible) as far as t needs."""
        self._source, self._chunks = source, iter(source)
        self._begin()
        return self

    def result_at(self, t_media: float) -> LipSyncResult | None:
        """In step: the first result at or after media time t_media (within one 10 ms hop), or the last one when
        the audio ends before t_media; the same for the same t, whoever asks first. A failing source ends the
        stream with `error` set, as on the thread."""
        with self._step_lock:
            while self._chunks is not None and (self._latest is None or self._latest.t_media < t_media):
                chunk = None
                try:
                    chunk = next(self._chunks, None)
                    if chunk is not None:
                        self._feed(chunk)
                except Exception as e:
                    self.error, chunk = f"{type(e).__name__}: {e}", None
                    log.error("audio lip-sync stopped: %s", self.error)
                if chunk is None:
                    self._chunks = None
            return self._recent.first_at_media(t_media) or self._latest

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._chunks = None
        if self._source is not None:
            self._source.close()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- worker thread (or the caller's, in step) ------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._consume(self._source)
        except Exception as e:  # a broken source or model must not take the caller down
            self.error = f"{type(e).__name__}: {e}"
            log.error("audio lip-sync stopped: %s", self.error)

    def _consume(self, source: AudioSource) -> None:
        self._begin()
        for chunk in source:
            if self._stop.is_set():
                return
            self._feed(chunk)

    def _begin(self) -> None:
        self._front = features.StreamingLogMel()
        self._clock = _Clock()
        self.model.reset()
        if self.vad is not None:
            self.vad.reset()
        self._samples = self._vad_end = 0
        self._activity = 1.0 if self.vad is None else 0.0
        self._vad_pending: collections.deque[tuple[int, float]] = collections.deque()  # (window's last sample, p)

    def _feed(self, chunk) -> None:
        """One chunk of audio. A source that fell behind hands over everything already captured as one chunk
        (sources.py), and one model step then covers it: catching up costs one inference call, not one per 10 ms."""
        front = self._front
        if self.t_start_mono is None:
            self.t_start_mono = chunk.t_capture_mono
        self._clock.add(self._samples, chunk.t_capture, chunk.t_capture_mono)
        self._samples += len(chunk.pcm)
        t0 = time.perf_counter()
        if self.vad is not None:
            for prob in self.vad.push(chunk.pcm):
                self._vad_end += VAD_WINDOW
                self._vad_pending.append((self._vad_end, prob))
        mel = front.push(chunk.pcm)
        if self.feature_listener is not None:
            self._tell_listener(mel, front.frames_emitted - len(mel), chunk.pcm, self._samples - len(chunk.pcm))
        if len(mel) == 0:
            return
        if self.swapper is not None and (ready := self.swapper.take("lipsync")) is not None:
            self._swap(ready.replacement, ready.request.version)
        vis, mouth = self.model.step(mel)
        self.compute_s += time.perf_counter() - t0
        self.hops += len(mel)
        first_row = front.frames_emitted - len(mel)
        for k in range(len(mel)):
            # speech probability of the newest audio this row saw, as if it had come in a chunk of its own
            row_end = (first_row + k) * features.HOP + features.WINDOW
            while self._vad_pending and self._vad_pending[0][0] <= row_end:
                self._activity = self._vad_pending.popleft()[1]
            frame = first_row + k - self.model.lookahead
            if frame < 0:
                continue
            t_media = float(features.frame_center_s(frame))
            wall, mono = self._clock.at(t_media * features.SAMPLE_RATE)
            self._publish(vis[k], mouth[k], self._activity, wall, mono, t_media)

    def _swap(self, model: LipSyncModel, version: str) -> None:
        """Serve `model` from this hop on. The recurrent state carries over when the shapes agree (an adapter
        update keeps the base), so the mouth does not jump back to its start-up pose."""
        if model.state_shape == self.model.state_shape and model.lookahead == self.model.lookahead:
            model._state = self.model._state
        self.model, self.model_version = model, version

    def _tell_listener(self, mel, first_frame, pcm, first_sample) -> None:
        times = np.array([self._clock.at(float(features.frame_center_s(first_frame + k)) * features.SAMPLE_RATE)[1]
                          for k in range(len(mel))])
        try:
            self.feature_listener(mel, times, first_frame, pcm, first_sample)
        except Exception as e:
            log.warning("audio feature listener failed (%s); it is switched off", e)
            self.feature_listener = None

    def _publish(self, vis, mouth, activity, wall, mono, t_media) -> None:
        now = time.perf_counter()
        gain = self.gate(activity, mono) if self.vad is not None else 1.0
        shapes = np.zeros(NUM_BLENDSHAPES, dtype=np.float32)
        shapes[MOUTH_ARKIT_INDICES] = np.asarray(mouth, np.float32) * gain
        visemes = np.asarray(vis, np.float32)
        if gain < 1.0:  # silence probability grows as the gate closes
            visemes = visemes * gain
            visemes[0] += 1.0 - gain
        latency_ms = max(0.0, now - mono) * 1000.0  # a file read ahead of real time waits for nothing
        result = LipSyncResult(visemes, shapes, MOUTH_MASK, float(activity), wall, mono, latency_ms,
                               self.model_version, t_media)
        self._recent.add(result)
        self._latest = result
        if self.history is not None:
            self.history.append(result)


__all__ = ["LipSyncModel", "LipSyncResult", "LipSyncStream", "MOUTH_MASK", "MOUTH_CHANNELS", "analyze",
           "load_adapter", "save_adapter", "model_bytes_with_adapter"]
