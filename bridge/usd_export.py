"""Export a recorded take (bridge/sinks/recorder.py) as a UsdSkel animation that usd-core, Omniverse and
Unreal's USD importer read: per subject a SkelRoot with a Skeleton whose SkelAnimation has the ARKit
`blendShapes` and time-sampled `blendShapeWeights`, plus Head and eye joint rotations (bridge/omniverse/usd_face).

Time: the stage runs at the take's frame rate (timeCodesPerSecond = framesPerSecond), time code 0 is the first
captured frame, and each frame sits at (t_capture - start) * frame_rate, so uneven capture timing survives;
`facebridge:captureTime` holds each frame's exact Unix capture time and the layer's customLayerData the start.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bridge import __version__
from bridge.errors import FaceBridgeError
from bridge.frame import FaceFrame
from bridge.fsutil import atomic_write_with

ROOT_PRIM = "/Take"
USD_SUFFIXES = (".usda", ".usd", ".usdc")


class UsdExportError(FaceBridgeError):
    """A take cannot be exported to USD."""


@dataclass
class ExportSummary:
    path: Path
    frames: int
    subjects: list[str]
    frame_rate: float
    duration_s: float
    skipped: int = 0  # frames whose capture time went backwards (clock step) or lines that did not decode
    prims: dict[str, str] = field(default_factory=dict)  # subject -> SkelRoot path


def _import_pxr():
    try:
        from pxr import Usd  # noqa: F401
    except ImportError as e:
        raise UsdExportError("USD export needs usd-core, which is not installed",
                             "pip install 'facebridge[usd]' (or pip install usd-core)") from e


def export_take(take: str | Path, out: str | Path, progress: Callable[[int, int], None] | None = None
                ) -> ExportSummary:
    """Write the take directory `take` to the USD file `out` (.usda text, .usdc/.usd binary), atomically."""
    from bridge.formats.take import TakeReader

    out = Path(out)
    if out.suffix.lower() not in USD_SUFFIXES:
        raise UsdExportError(f"{out} does not end in .usda, .usdc or .usd", "name the output e.g. take.usda")
    _import_pxr()
    from pxr import Usd

    from bridge.omniverse.usd_face import FaceRig, prepare_stage, prim_name

    reader = TakeReader(take)
    frames: list[FaceFrame] = list(reader)
    if not frames:
        raise UsdExportError(f"take {take} holds no readable frames", "export a take that recorded frames")
    frame_rate = float(reader.metadata.get("frame_rate") or frames[0].frame_rate or 30.0)
    if not frame_rate > 0:
        raise UsdExportError(f"take {take} has frame rate {frame_rate}", "fix frame_rate in its take.json")
    start = frames[0].t_capture

    stage = Usd.Stage.CreateInMemory()
    prepare_stage(stage, frame_rate)
    root = stage.DefinePrim(ROOT_PRIM, "Xform")
    stage.SetDefaultPrim(root)
    rigs: dict[str, FaceRig] = {}
    last_code: dict[str, float] = {}
    summary = ExportSummary(path=out, frames=0, subjects=[], frame_rate=frame_rate, duration_s=0.0,
                            skipped=reader.skipped)
    used_names: set[str] = set()
    end_code = 0.0
    for i, frame in enumerate(frames):
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
        code = (frame.t_capture - start) * frame_rate
        if code <= last_code.get(frame.subject, -1.0):
            summary.skipped += 1  # a clock step backwards would reorder samples
            continue
        last_code[frame.subject] = code
        try:
            rig.write(Usd.TimeCode(code), frame.blendshapes, frame.head_rotation, frame.eye_left, frame.eye_right,
                      confidence=frame.confidence, face_found=frame.face_found, emotions=frame.emotion,
                      capture_time=frame.t_capture, head_translation_cm=frame.head_translation)
        except ValueError as e:
            raise UsdExportError(f"frame {frame.seq} of {take} does not fit its subject's layout ({e})",
                                 "re-record the take; it mixes frames of different layouts") from e
        summary.frames += 1
        end_code = max(end_code, code)
        if progress and (i % 200 == 0 or i == len(frames) - 1):
            progress(i + 1, len(frames))
    stage.SetStartTimeCode(0.0)
    stage.SetEndTimeCode(end_code)
    summary.duration_s = end_code / frame_rate
    layer = stage.GetRootLayer()
    layer.customLayerData = {
        "facebridge:version": __version__,
        "facebridge:take": str(Path(take).resolve().name),
        "facebridge:startTimeUnix": float(start),
        "facebridge:started": dt.datetime.fromtimestamp(start, dt.timezone.utc).isoformat(),
        "facebridge:frameRate": frame_rate,
    }
    layer.documentation = f"FaceBridge take {Path(take).name}: {summary.frames} frames at {frame_rate:g} fps"
    _save(layer, out)
    return summary


def _names(frame: FaceFrame):
    from bridge.frame import ARKIT_NAMES

    n = len(frame.blendshapes)
    return ARKIT_NAMES if n == len(ARKIT_NAMES) else tuple(f"curve{i}" for i in range(n))


def _emotion_names(frame: FaceFrame) -> list[str]:
    from bridge.frame import EMOTION_NAMES

    return list(EMOTION_NAMES) if len(frame.emotion) == len(EMOTION_NAMES) else []


def _save(layer, out: Path) -> None:
    """Write the layer through bridge.fsutil: a temporary file of the same suffix (USD picks the format by it),
    fsynced and renamed."""
    def export(tmp: Path) -> None:
        if not layer.Export(str(tmp)):
            raise UsdExportError(f"USD could not write {out}", "check free disk space and permissions")

    atomic_write_with(out, export, suffix=out.suffix)
