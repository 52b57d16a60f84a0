"""FaceBridge: webcam and microphone to real-time facial animation for Unreal Engine and Omniverse."""

import os as _os

__version__ = "0.1.0"

# FFmpeg inside OpenCV prints raw decoder noise ("moov atom not found") for unreadable videos; FaceBridge reports
# such files itself in one line with the fix. FACEBRIDGE_FFMPEG_LOGS=1 keeps FFmpeg's own messages.
# OpenCV's own warnings (one per camera index probed) are noise for the same reason.
if not _os.environ.get("FACEBRIDGE_FFMPEG_LOGS"):
    _os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    _os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
