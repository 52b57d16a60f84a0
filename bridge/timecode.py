"""SMPTE timecode rates and labels: what `--timecode-rate` accepts and how a frame number since midnight reads as
`HH:MM:SS:FF` (or, for the drop-frame rates 29.97 and 59.94, `HH:MM:SS;FF`).

Every output counts frames since midnight of the capture clock at the stated rate (FaceFrame.timecode): NTSC rates
as their exact fractions (30000/1001), so a frame number is a real count of frames. Drop-frame only changes how that
count is written: frame numbers 00 and 01 (00-03 at 59.94) are skipped at the start of every minute except each
tenth, so the label keeps up with the clock. The label arithmetic is the `timecode` library's (SMPTE, drop-frame
included; its frame numbers count from 1).
"""
from __future__ import annotations

from timecode import Timecode

from bridge.errors import FaceBridgeError

# --timecode-rate -> frames per second; 29.97 and 59.94 are drop-frame
RATES = {"23.976": 24000 / 1001, "24": 24.0, "25": 25.0, "29.97": 30000 / 1001, "30": 30.0, "48": 48.0, "50": 50.0,
         "59.94": 60000 / 1001, "60": 60.0}
DROP_FRAME = ("29.97", "59.94")
_BY_FRACTION = {(24000, 1001): "23.976", (30000, 1001): "29.97", (60000, 1001): "59.94"}


def check_rate(text: str) -> float:
    """A --timecode-rate as frames per second; one line naming the rates otherwise."""
    rate = RATES.get(str(text).strip())
    if rate is None:
        raise FaceBridgeError(f"--timecode-rate {text} is not a timecode rate",
                              f"choose one of {', '.join(RATES)} (29.97 and 59.94 are drop-frame)")
    return rate


def rate_name(num: int, den: int) -> str:
    """The `timecode` library's name of a rate fraction: '29.97' for 30000/1001, '25' for 25/1."""
    return _BY_FRACTION.get((num, den)) or f"{num / den:g}"


def label(frame_number: int, num: int, den: int) -> str:
    """'HH:MM:SS:FF' of a frame number since midnight at num/den fps ('HH:MM:SS;FF' at 29.97 and 59.94)."""
    name = rate_name(num, den)
    return str(Timecode(name, frames=int(frame_number) + 1, force_non_drop_frame=name not in DROP_FRAME))


def frames_of(text: str, num: int, den: int) -> int:
    """The frame number since midnight that a label names (the inverse of `label`)."""
    name = rate_name(num, den)
    return Timecode(name, text, force_non_drop_frame=name not in DROP_FRAME).frames - 1
