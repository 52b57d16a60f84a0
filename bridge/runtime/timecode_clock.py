"""Where a run's timecode comes from (`--timecode-source system|ntp|ltc`) and at which rate it counts
(`--timecode-rate`).

Every output computes timecode from a frame's capture time and rate (FaceFrame.timecode: frames since midnight),
so a timecode source is an offset added to the capture clock, and a rate the frame rate outputs state: the clock
stamps each frame once, after describe, and Live Link Face packets, the take (JSON lines, the CSV's `HH:MM:SS:FF`,
drop-frame at 29.97 and 59.94), gRPC and the USD exported from the take all carry it.

- system: this machine's clock (offset 0), as before.
- ntp: the offset of an NTP server's clock (ntplib), measured at start (a server that does not answer is an error)
  and again every NTP_REFRESH_S; a failed refresh keeps the last offset.
- ltc: LTC from an audio input (a Tentacle Sync's or a generator's output into a microphone input, or a file played
  at real time), decoded by bridge/audio/ltc.py on its own thread. Each decoded frame's label, read at the LTC's
  rate (the --timecode-rate, halved above 30 fps: LTC runs at 25 or 30 beside 50 or 60 fps video), against the
  wall-clock time its first bit was captured gives the offset; the median of the last LTC_WINDOW frames is used, so
  audio block jitter does not move it. The run starts once LTC is found (at most LTC_LOCK_S, else a one-line
  error); when LTC stops, the clock runs on from the last offset (as a generator free-runs after a jam sync), and
  the run says so once.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import statistics
import threading

import ntplib

from bridge.audio.features import SAMPLE_RATE
from bridge.audio.ltc import LtcDecoder
from bridge.audio.sources import open_audio
from bridge.errors import FaceBridgeError
from bridge.frame import rate_fraction
from bridge.sinks.udp import parse_host_port
from bridge.timecode import check_rate, frames_of

log = logging.getLogger(__name__)

SOURCES = ("system", "ntp", "ltc")
NTP_REFRESH_S = 64.0
LTC_WINDOW = 25
LTC_LOCK_S = 5.0
LTC_LOST_S = 1.0
DAY = 86400.0


def _wrapped(offset: float) -> float:
    """An offset of time of day, in (-12 h, 12 h]: LTC carries no date."""
    return (offset + DAY / 2) % DAY - DAY / 2


class TimecodeClock:
    """The system clock at the source's rate, or at `rate` frames per second."""

    name = "system clock"

    def __init__(self, rate: float | None = None) -> None:
        self.rate = rate
        self.offset = 0.0  # seconds added to the capture clock

    def stamp(self, frame):
        if not self.offset and self.rate is None:
            return frame
        return dataclasses.replace(frame, t_capture=frame.t_capture + self.offset,
                                   frame_rate=self.rate if self.rate is not None else frame.frame_rate)

    def wrap(self, step):
        """`step` with every frame it gives stamped (one FaceFrame, or a list of them with several faces)."""
        def stamped(item):
            out = step(item)
            return [self.stamp(f) for f in out] if isinstance(out, list) else self.stamp(out)

        return stamped

    def wait_locked(self) -> None:
        """Return once the clock knows the time (at once but for LTC)."""

    def describe(self) -> str:
        rate = f" at {self.rate:.5g} fps" if self.rate is not None else ""
        return f"timecode from the {self.name}{rate}"

    def close(self) -> None:
        pass


class NtpClock(TimecodeClock):
    def __init__(self, server: str, rate: float | None = None) -> None:
        super().__init__(rate)

        self.host, self.port = parse_host_port(server, 123, "--ntp-server")
        self.name = f"NTP server {self.host}:{self.port}"
        self._client = ntplib.NTPClient()
        try:
            self.offset = self._measure()
        except (OSError, ntplib.NTPException) as e:
            raise FaceBridgeError(f"NTP server {self.host}:{self.port} did not answer ({e})",
                                  "check --ntp-server and the network, or use --timecode-source system") from None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh, name="ntp-clock", daemon=True)
        self._thread.start()

    def _measure(self) -> float:
        return float(self._client.request(self.host, version=3, port=self.port, timeout=2).offset)

    def _refresh(self) -> None:
        while not self._stop.wait(NTP_REFRESH_S):
            try:
                self.offset = self._measure()
            except (OSError, ntplib.NTPException) as e:
                log.warning("NTP server %s did not answer (%s); the last offset stays", self.host, e)

    def close(self) -> None:
        self._stop.set()


class LtcClock(TimecodeClock):
    def __init__(self, audio_spec: str, rate: float) -> None:
        super().__init__(rate)

        self.name = f"LTC on {audio_spec}"
        num, den = rate_fraction(rate)
        if num / den > 30.5:  # LTC runs at half a high video rate
            num, den = (num // 2, den) if num % 2 == 0 else (num, den * 2)
        self._ltc_rate = (num, den)
        self._audio = open_audio(audio_spec, realtime=True)
        self._offsets: collections.deque[float] = collections.deque(maxlen=LTC_WINDOW)
        self._locked = threading.Event()
        self.frames = 0
        self._thread = threading.Thread(target=self._read, name="ltc-clock", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        decoder, fed = LtcDecoder(), 0
        num, den = self._ltc_rate
        lost_said = False
        last_wall = None
        try:
            for chunk in self._audio:
                for ltc in decoder.feed(chunk.pcm):
                    wall = chunk.t_capture + (ltc.start_sample - fed) / SAMPLE_RATE
                    seconds = frames_of(ltc.text, num, den) * den / num
                    self._offsets.append(_wrapped(seconds - wall % DAY))
                    self.offset = statistics.median(self._offsets)
                    self.frames += 1
                    last_wall, lost_said = wall, False
                    self._locked.set()
                fed += len(chunk.pcm)
                if last_wall is not None and not lost_said and chunk.t_capture - last_wall > LTC_LOST_S + 0.1:
                    log.warning("LTC lost on %s: the timecode runs on from the last LTC", self.name)
                    lost_said = True
        except Exception as e:  # noqa: BLE001 - an input that fails leaves the clock running on
            log.warning("LTC input %s failed (%s); the timecode runs on from the last LTC", self.name, e)
        if self._locked.is_set():
            log.warning("LTC input %s ended: the timecode runs on from the last LTC", self.name)

    def wait_locked(self) -> None:
        if not self._locked.wait(LTC_LOCK_S):
            raise FaceBridgeError(f"no LTC found on {self.name.removeprefix('LTC on ')} within {LTC_LOCK_S:g} s",
                                  "check the timecode cable and the input's level (`facebridge devices` lists "
                                  "inputs), or use --timecode-source system")

    def close(self) -> None:
        self._audio.close()


def open_clock(source: str, rate: str | None, ltc_input: str | None = None, ntp_server: str | None = None):
    """The clock `--timecode-source` names, checked (a bad rate, a missing LTC input: one line)."""
    fps = check_rate(rate) if rate is not None else None
    if source == "system":
        return TimecodeClock(fps)
    if source == "ntp":
        return NtpClock(ntp_server or "pool.ntp.org", fps)
    if source == "ltc":
        if fps is None:
            raise FaceBridgeError("--timecode-source ltc needs --timecode-rate (the LTC's rate)",
                                  "add --timecode-rate 25 (or 23.976, 24, 29.97, 30, ...)")
        return LtcClock(ltc_input or "mic", fps)
    raise FaceBridgeError(f"--timecode-source {source} is not a timecode source", f"choose one of {', '.join(SOURCES)}")
