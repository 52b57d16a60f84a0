"""Audio inputs: a microphone (sounddevice/PortAudio) or an audio file (soundfile), as 16 kHz mono chunks.

`open_audio("mic")`, `open_audio("mic:2")` or `open_audio("speech.wav")` returns an AudioSource: iterate it to
get AudioChunk objects stamped with the capture time of their first sample, on the same clocks as video
frames (time.time() for timecode, time.perf_counter() for latency). Files play at real time by default.
Anything unusable (no PortAudio, no microphone, a corrupt or unsupported file, an odd sample rate or channel
count) raises SourceError with the fix in the message.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

from bridge.audio.features import SAMPLE_RATE
from bridge.errors import SourceError

log = logging.getLogger(__name__)

MIN_RATE, MAX_RATE = 8000, 384000
MAX_CHANNELS = 32
CHUNK_MS = 10
MAX_CATCH_UP_S = 1.0  # most audio handed over at once to a reader that fell behind
PORTAUDIO_FIX = "install PortAudio (Debian/Ubuntu: `apt-get install libportaudio2`) or pass an audio file instead"


def _why(e: BaseException) -> str:
    """An exception as a short clause for inside parentheses."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(". ") or type(e).__name__


@dataclass
class AudioChunk:
    pcm: np.ndarray  # float32, 16 kHz mono, in [-1, 1]
    t_capture: float  # wall-clock seconds (time.time()) of the first sample
    t_capture_mono: float  # time.perf_counter() of the first sample

    @property
    def duration(self) -> float:
        return len(self.pcm) / SAMPLE_RATE


class AudioSource:
    """Iterable of AudioChunk. `close()` ends iteration from another thread."""

    name = "audio"

    def __iter__(self) -> Iterator[AudioChunk]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def to_mono_16k(data: np.ndarray, rate: int, what: str = "audio") -> np.ndarray:
    """(frames,) or (frames, channels) at `rate` -> float32 mono at 16 kHz. Channels are averaged."""
    if not MIN_RATE <= rate <= MAX_RATE:
        raise SourceError(f"{what} has an unexpected sample rate of {rate} Hz",
                          f"use audio sampled between {MIN_RATE} and {MAX_RATE} Hz (16 kHz or 48 kHz are typical)")
    data = np.asarray(data, dtype=np.float32)
    if data.ndim == 2:
        if not 1 <= data.shape[1] <= MAX_CHANNELS:
            raise SourceError(f"{what} has {data.shape[1]} channels", f"use mono or stereo audio (at most "
                              f"{MAX_CHANNELS} channels)")
        data = data.mean(axis=1)
    if rate != SAMPLE_RATE:
        data = soxr.resample(data, rate, SAMPLE_RATE, quality="HQ")
    return np.ascontiguousarray(data, dtype=np.float32)


def load_audio_file(path: str | Path) -> np.ndarray:
    """Whole file -> float32 16 kHz mono. Raises SourceError for missing, corrupt or unsupported files."""
    # import cost: soundfile (about 0.06 s), for audio files only
    import soundfile as sf

    path = Path(path)
    if not path.exists():
        raise SourceError(f"audio file {path} does not exist", "check the path")
    if path.is_dir():
        raise SourceError(f"audio path {path} is a folder", "pass an audio file such as speech.wav")
    try:  # the system's refusal (a permission) is named as such, never taken for a corrupt file
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise SourceError(f"cannot read audio file {path} ({e.strerror})",
                          "check that this user may read it (`ls -l` shows owner and mode)") from None
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise SourceError(f"cannot read audio file {path} ({_why(e)})",
                          "use a WAV, FLAC or OGG file (convert others with `sox IN out.wav` or ffmpeg)") from None
    if len(data) == 0:
        raise SourceError(f"audio file {path} contains no samples", "record or choose a file with sound in it")
    pcm = to_mono_16k(data, int(rate), what=f"audio file {path}")
    if not np.all(np.isfinite(pcm)):
        raise SourceError(f"audio file {path} contains invalid (NaN or infinite) samples", "re-export the file")
    return np.clip(pcm, -1.0, 1.0)


class FileSource(AudioSource):
    """Plays a decoded file in CHUNK_MS chunks, at real time by default (each chunk is yielded once its
    last sample 'has been captured', like a microphone), or as fast as possible with realtime=False. A reader
    that fell behind real time gets everything already 'captured' as one chunk (up to MAX_CATCH_UP_S), as a
    microphone's buffer would hold it, so it catches up in one step instead of one per 10 ms."""

    def __init__(self, path: str | Path, realtime: bool = True, loop: bool = False, chunk_ms: int = CHUNK_MS):
        self.path = Path(path)
        self.name = f"file:{self.path.name}"
        self.pcm = load_audio_file(self.path)
        self.realtime = realtime
        self.loop = loop
        self.chunk = max(1, SAMPLE_RATE * chunk_ms // 1000)
        self._closed = threading.Event()

    @property
    def duration(self) -> float:
        return len(self.pcm) / SAMPLE_RATE

    def __iter__(self) -> Iterator[AudioChunk]:
        start_mono, start_wall = time.perf_counter(), time.time()
        offset = 0  # samples played since start (grows across loops)
        while not self._closed.is_set():
            pos = offset % len(self.pcm) if self.loop else offset
            if pos >= len(self.pcm):
                return
            size = self.chunk
            if self.realtime:  # behind: hand over all that is due
                due = int((time.perf_counter() - start_mono) * SAMPLE_RATE) - offset
                size = max(size, min(due, int(MAX_CATCH_UP_S * SAMPLE_RATE)))
            pcm = self.pcm[pos:pos + size]
            t_first = offset / SAMPLE_RATE
            if self.realtime:
                wait = start_mono + t_first + len(pcm) / SAMPLE_RATE - time.perf_counter()
                if wait > 0 and self._closed.wait(wait):
                    return
            yield AudioChunk(pcm, start_wall + t_first, start_mono + t_first)
            offset += len(pcm)

    def close(self) -> None:
        self._closed.set()


def _sounddevice():
    try:
        # optional extra: mic (sounddevice, which needs PortAudio)
        import sounddevice as sd
    except OSError as e:  # raised at import when libportaudio is missing
        raise SourceError(f"PortAudio is not available ({_why(e)})", PORTAUDIO_FIX) from None
    except ImportError:
        raise SourceError("the sounddevice package is not installed",
                          "install the microphone extra: pip install 'facebridge[mic]'") from None
    return sd


def list_input_devices(with_reason: bool = False):
    """Audio input devices as dicts (index, name, channels, samplerate (default), hostapi, default).
    Never raises: without PortAudio it returns [] (and, with with_reason=True, the reason as a second value)."""
    reason = None
    devices: list[dict] = []
    try:
        sd = _sounddevice()
        try:
            default_in = sd.default.device[0]
        except Exception:
            default_in = -1
        hostapis = sd.query_hostapis()
        for i, d in enumerate(sd.query_devices()):
            if d.get("max_input_channels", 0) > 0:
                devices.append({"index": i, "name": d["name"], "channels": int(d["max_input_channels"]),
                                "samplerate": float(d["default_samplerate"]),
                                "hostapi": hostapis[d["hostapi"]]["name"], "default": i == default_in})
        if not devices:
            reason = "PortAudio found no audio input device"
    except SourceError as e:
        reason = str(e)
    except Exception as e:  # PortAudioError and friends: report, never raise
        reason = f"PortAudio could not list devices ({_why(e)})"
    if reason:
        log.info("no audio inputs: %s", reason)
    return (devices, reason) if with_reason else devices


class MicrophoneSource(AudioSource):
    """A PortAudio input stream. Opens at 16 kHz when the device allows it, else at its own rate with
    streaming resampling. The PortAudio callback only copies into a bounded queue; when the consumer falls
    behind, the oldest audio is dropped rather than letting latency grow."""

    def __init__(self, device: int | None = None, block_ms: int = CHUNK_MS, max_queue_ms: int = 500):
        sd = _sounddevice()
        self.name = f"mic:{device}" if device is not None else "mic"
        try:
            info = sd.query_devices(device, kind="input") if device is not None else sd.query_devices(kind="input")
        except (ValueError, sd.PortAudioError) as e:
            names = [f"{d['index']}: {d['name']}" for d in list_input_devices()]
            if device is None:
                fix = "plug one in, check `facebridge devices`, or pass an audio file with --audio FILE"
                raise SourceError(f"no microphone found ({_why(e)})", fix) from None
            raise SourceError(f"audio input device {device} is not available ({_why(e)})",
                              "choose one of: " + ("; ".join(names) if names else "none found") +
                              " (see `facebridge devices`)") from None
        self._queue: queue.Queue = queue.Queue(maxsize=max(2, max_queue_ms // block_ms))
        self._closed = threading.Event()
        self.dropped_chunks = 0
        self._resampler = None
        rate = SAMPLE_RATE
        try:
            sd.check_input_settings(device=device, channels=1, samplerate=SAMPLE_RATE, dtype="float32")
        except Exception:
            rate = int(info["default_samplerate"])
            self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        self.device_rate = rate
        try:
            self._stream = sd.InputStream(device=device, channels=1, samplerate=rate, dtype="float32",
                                          blocksize=max(1, rate * block_ms // 1000), latency="low",
                                          callback=self._on_audio)
            self._stream.start()
        except Exception as e:
            raise SourceError(f"cannot open microphone {info.get('name', device)!r} ({_why(e)})",
                              "close other programs using it, or choose another with --audio mic:INDEX") from None

    def _on_audio(self, indata, frames, time_info, status):
        now_mono, now_wall = time.perf_counter(), time.time()
        # the first sample of this block was captured a block plus the input latency ago
        age = frames / self.device_rate + float(self._stream.latency or 0.0)
        # a misbehaving driver can hand over NaN or out-of-range values; never let them reach the model
        pcm = np.clip(np.nan_to_num(indata[:, 0], nan=0.0, posinf=0.0, neginf=0.0), -1.0, 1.0)
        item = (pcm.astype(np.float32), now_wall - age, now_mono - age)
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped_chunks += 1
            try:
                self._queue.get_nowait()
                self._queue.put_nowait(item)
            except (queue.Empty, queue.Full):
                pass

    def __iter__(self) -> Iterator[AudioChunk]:
        """Blocks as they arrive; a reader that fell behind gets every block queued since as one chunk (they are
        contiguous: an overflow drops the oldest, so a gap can only come before the first)."""
        while not self._closed.is_set():
            try:
                pcm, t_wall, t_mono = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            more = []
            while True:
                try:
                    more.append(self._queue.get_nowait()[0])
                except queue.Empty:
                    break
            if more:
                pcm = np.concatenate([pcm, *more])
            if self._resampler is not None:
                pcm = self._resampler.resample_chunk(pcm)
            if len(pcm):
                yield AudioChunk(np.ascontiguousarray(pcm, dtype=np.float32), t_wall, t_mono)

    def close(self) -> None:
        self._closed.set()
        try:
            self._stream.stop()
            self._stream.close()
        except Exception:
            pass


SAMPLE_SPEECH = Path(__file__).resolve().parents[1] / "data" / "sample_speech.wav"


def open_audio(spec: str, realtime: bool = True, loop: bool = False) -> AudioSource:
    """"mic", "mic:INDEX", "sample" (the bundled soundtrack) or a file path -> an AudioSource."""
    spec = str(spec).strip()
    if spec == "sample":  # loops with a looping video (the sample clip); an audio-only run ends with it
        return FileSource(SAMPLE_SPEECH, realtime=realtime, loop=loop)
    if spec == "mic" or spec.startswith("mic:"):
        index = spec[4:]
        if index and not index.lstrip("-").isdigit():
            raise SourceError(f"microphone index {index!r} is not a number", "use mic or mic:INDEX, with INDEX from "
                              "`facebridge devices`")
        return MicrophoneSource(int(index) if index else None)
    if not spec:
        raise SourceError("no audio source given", "use --audio mic, --audio mic:INDEX or --audio FILE.wav")
    return FileSource(spec, realtime=realtime)
