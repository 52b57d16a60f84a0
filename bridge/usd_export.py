"""Export a recorded take (bridge/sinks/recorder.py) as a UsdSkel animation that usd-core, Omniverse and
Unreal's USD importer read: per subject a SkelRoot with a Skeleton whose SkelAnimation has the ARKit
`blendShapes` and time-sampled `blendShapeWeights`, plus Head and eye joint rotations (bridge/omniverse/usd_face).

Time: the stage runs at the take's frame rate (timeCodesPerSecond = framesPerSecond), time code 0 is the first
captured frame, and each frame sits at (t_capture - start) * frame_rate, so uneven capture timing survives; a
code within SNAP_S of a whole frame is that whole frame, so a take recorded at a steady rate has time codes
0, 1, 2, ... exactly (scrubbing to frame N shows frame N, not an interpolation). `facebridge:captureTime` holds
each frame's exact Unix capture time and the layer's customLayerData the start.

Memory: the take is streamed, one frame at a time, into the USD layer (which holds only the samples); the frames
are checked and time jumps clamped by TakeReader, so a damaged line costs that line, never the export.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bridge import __version__
from bridge.errors import FaceBridgeError
from bridge.formats.livelinkface import csv_timecode
from bridge.formats.take import TakeReader
from bridge.frame import ARKIT_NAMES, EMOTION_NAMES, FaceFrame
from bridge.fsutil import atomic_write_with, is_utf8, printable

ROOT_PRIM = "/Take"
USD_SUFFIXES = (".usda", ".usd", ".usdc")
SNAP_S = 5e-6  # a sample this close to a whole frame is on it: Unix seconds near 1.8e9 carry float rounding of
# about 2.4e-7 s, so a steady take's codes come out 0.99999904 instead of 1 without it


class UsdExportError(FaceBridgeError):
    """A take cannot be exported to USD."""


@dataclass
class ExportSummary:
    path: Path
    frames: int
    subjects: list[str]
    frame_rate: float
    duration_s: float
    skipped: int = 0  # lines that are not frames (TakeReader says which)
    clamped: int = 0  # frames whose capture time jumped and was moved one frame after the one before
    prims: dict[str, str] = field(default_factory=dict)  # subject -> SkelRoot path


def _import_pxr():
    try:
        from pxr import Usd  # noqa: F401
    except ImportError as e:
        raise UsdExportError("USD export needs usd-core, which is not installed",
                             "pip install 'facebridge[usd]' (or pip install usd-core)") from e


def time_code(t_capture: float, start: float, frame_rate: float) -> float:
    """The stage time of a frame: frames since the first, a whole number when it is within SNAP_S of one."""
    code = (t_capture - start) * frame_rate
    whole = round(code)
    return float(whole) if abs(code - whole) <= SNAP_S * frame_rate else code


def _count_lines(path: Path) -> int:
    count = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
    return count


def export_take(take: str | Path, out: str | Path, progress: Callable[[int, int], None] | None = None
                ) -> ExportSummary:
    """Write the take directory `take` to the USD file `out` (.usda text, .usdc/.usd binary), atomically,
    reading the take one frame at a time."""
    out = Path(out)
    if out.suffix.lower() not in USD_SUFFIXES:
        raise UsdExportError(f"{printable(out)} does not end in .usda, .usdc or .usd", "name the output e.g. take.usda")
    if not is_utf8(out.resolve()):
        raise UsdExportError(f"the output path {printable(out)} is not UTF-8 text, which USD cannot write",
                             "write to a path whose folders and name are UTF-8 (plain letters are safe)")
    _import_pxr()
    # optional extra: usd (pxr, which usd_face imports too); without it the command ends in the line above
    from pxr import Usd

    from bridge.omniverse.usd_face import FaceRig, prepare_stage, prim_name

    reader = TakeReader(take)
    total = reader.metadata.get("frames") or _count_lines(reader.frames_path)
    stage = Usd.Stage.CreateInMemory()
    root = stage.DefinePrim(ROOT_PRIM, "Xform")
    stage.SetDefaultPrim(root)
    rigs: dict[str, FaceRig] = {}
    last_code: dict[str, float] = {}
    summary = ExportSummary(path=out, frames=0, subjects=[], frame_rate=0.0, duration_s=0.0)
    used_names: set[str] = set()
    end_code = 0.0
    start = frame_rate = None
    for i, frame in enumerate(reader):
        if start is None:
            start = frame.t_capture
            frame_rate = float(reader.metadata.get("frame_rate") or frame.frame_rate or 30.0)
            prepare_stage(stage, frame_rate)
            summary.frame_rate = frame_rate
        rig = rigs.get(frame.subject)
        if rig is None:
            name = prim_name(frame.subject)
            while name in used_names:
                name += "_"
            used_names.add(name)
            path = f"{ROOT_PRIM}/{name}"
            rig = rigs[frame.subject] = FaceRig(stage, path, list(_names(frame)), _emotion_names(frame))
            rig.root.GetPrim().SetCustomDataByKey("facebridge:subject", frame.subject)
            summary.subjects.append(frame.subject)
            summary.prims[frame.subject] = path
        code = time_code(frame.t_capture, start, frame_rate)
        if code <= last_code.get(frame.subject, -1.0):  # two frames within SNAP_S of one whole frame
            summary.skipped += 1
            continue
        try:
            rig.write(Usd.TimeCode(code), frame.blendshapes, frame.head_rotation, frame.eye_left, frame.eye_right,
                      confidence=frame.confidence, face_found=frame.face_found, emotions=frame.emotion,
                      capture_time=frame.t_capture, head_translation_cm=frame.head_translation)
        except ValueError as e:  # a frame of another layout than its subject's first: this frame only
            summary.skipped += 1
            reader._note(f"frame {frame.seq} does not fit its subject's layout ({e}); skipped")
            continue
        last_code[frame.subject] = code
        summary.frames += 1
        end_code = max(end_code, code)
        if progress and (i % 200 == 0):
            progress(i + 1, max(total, i + 1))
    if start is None:
        raise UsdExportError(f"take {printable(take)} holds no readable frames", "export a take that recorded frames")
    if progress:
        progress(summary.frames, summary.frames)
    summary.skipped += reader.skipped
    summary.clamped = reader.clamped
    stage.SetStartTimeCode(0.0)
    stage.SetEndTimeCode(end_code)
    summary.duration_s = end_code / frame_rate
    layer = stage.GetRootLayer()
    layer.customLayerData = {
        "facebridge:version": __version__,
        "facebridge:take": printable(Path(take).resolve().name),
        "facebridge:startTimeUnix": float(start),
        "facebridge:started": dt.datetime.fromtimestamp(start, dt.timezone.utc).isoformat(),
        "facebridge:frameRate": frame_rate,
        "facebridge:startTimecode": csv_timecode(FaceFrame(seq=0, t_capture=float(start), t_capture_mono=0.0,
                                                           frame_rate=frame_rate).timecode()),
    }
    layer.documentation = f"FaceBridge take {printable(Path(take).name)}: {summary.frames} frames at {frame_rate:g} fps"
    _save(layer, out)
    return summary


def _names(frame: FaceFrame):
    n = len(frame.blendshapes)
    return ARKIT_NAMES if n == len(ARKIT_NAMES) else tuple(f"curve{i}" for i in range(n))


def _emotion_names(frame: FaceFrame) -> list[str]:
    return list(EMOTION_NAMES) if len(frame.emotion) == len(EMOTION_NAMES) else []


def _save(layer, out: Path) -> None:
    """Write the layer through bridge.fsutil: a temporary file of the same suffix (USD picks the format by it),
    fsynced and renamed."""
    def export(tmp: Path) -> None:
        if not layer.Export(str(tmp)):
            raise UsdExportError(f"USD could not write {out}", "check free disk space and permissions")

    try:
        atomic_write_with(out, export, suffix=out.suffix)  # creates a missing folder on the way
    except OSError as e:  # a folder that cannot be made (a file in the way, no permission, read-only disk)
        where = e.filename or out.parent
        raise UsdExportError(f"cannot write {out} ({e.strerror or e}: {where})",
                             "choose a folder you can write to; missing folders are created") from None
