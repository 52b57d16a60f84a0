"""Timecode labels: non-drop counts, drop-frame at 29.97 and 59.94 (SMPTE's skipped numbers), rates checked."""
import pytest

from bridge.errors import FaceBridgeError
from bridge.formats.livelinkface import csv_timecode
from bridge.timecode import check_rate, frames_of, label


@pytest.mark.parametrize("frame, num, den, text", [
    (0, 25, 1, "00:00:00:00"),
    (25 * 3600 + 24, 25, 1, "01:00:00:24"),
    (1799, 30000, 1001, "00:00:59;29"),
    (1800, 30000, 1001, "00:01:00;02"),  # 00 and 01 are skipped at the start of minute 1
    (17982, 30000, 1001, "00:10:00;00"),  # ... but not of minute 10
    (3600, 60000, 1001, "00:01:00;04"),  # four skipped at 59.94
    (24, 24000, 1001, "00:00:01:00"),  # 23.976 is not drop-frame
])
def test_labels_and_back(frame, num, den, text):
    assert label(frame, num, den) == text
    assert frames_of(text, num, den) == frame


def test_the_csv_writes_drop_frame_with_a_semicolon():
    assert csv_timecode((1800, 0.5, 30000, 1001)) == "00:01:00;02.500"
    assert csv_timecode((90000, 0.25, 25, 1)) == "01:00:00:00.250"


def test_rates():
    assert check_rate("29.97") == pytest.approx(30000 / 1001) and check_rate("25") == 25.0
    with pytest.raises(FaceBridgeError, match="choose one of"):
        check_rate("31")
