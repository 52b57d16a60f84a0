"""Tuning: each subject's blendshape mapping (bridge/mapping.py) applied to every frame after calibration and before
every output, and the head's dead zone.

It wraps the describing step (inside the output guard, so a frame the guard repeats is never mapped twice), so
Live Link Face, VMC, iFacialMocap, gRPC, the take (and so USD) and the monitor all see the same mapped frame. A
mapped frame is a new FaceFrame: the describer keeps its own (unmapped) frame for what a lost face relaxes from.
The mapping in use can be replaced while the stream runs (`set_mapping`, the monitor page); the next frame takes
it. What each subject's weights reached before mapping is kept (`peaks`), for range calibration and for the page's
peak-hold markers.

For the monitor page (bridge/monitor/tuning_api.py) it also answers what a subject's mapping is and what its
weights read before and after it (`view`), changes one blendshape's settings (`set_shape`), sets gains from the
peaks (`apply_ranges`, the page's range calibration: bridge/ranges.py's arithmetic) and stores the mapping in the
subject's profile (`save`). The peaks are bridge/ranges.py's: the highest weight held for two frames in a row.

The head dead zone is a backlash per angle: the output holds still until the measured angle is more than the dead
zone away from it, then follows at that distance. It removes a still head's jitter without a jump when the head
starts moving.
"""
from __future__ import annotations

import dataclasses
import threading

import numpy as np

from bridge.calibration import CalibrationProfile
from bridge.frame import ARKIT_INDEX, ARKIT_NAMES, NUM_BLENDSHAPES, FaceFrame
from bridge.mapping import Mapping
from bridge.ranges import STEPS, ranges_from_peaks, step_shapes


class Tuning:
    """The run's mappings by subject (a subject without one uses `default`), and their state."""

    def __init__(self, mappings: dict[str, Mapping] | None = None, default: Mapping | None = None,
                 head_dead_zone: float | None = None) -> None:
        self.mappings = dict(mappings or {})
        self.default = default
        self.head_dead_zone = head_dead_zone  # degrees; None: each mapping's own
        self._held: dict[str, np.ndarray] = {}
        self._peaks: dict[str, np.ndarray] = {}  # subject -> the highest weight before mapping held two frames
        self._last: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # subject -> (weights before, after mapping)
        self._lock = threading.Lock()

    def mapping(self, subject: str) -> Mapping | None:
        return self.mappings.get(subject, self.default)

    def set_mapping(self, subject: str, mapping: Mapping) -> None:
        """Use `mapping` for `subject` from the next frame on."""
        self.mappings[subject] = mapping

    def peaks(self, subject: str) -> np.ndarray:
        with self._lock:
            return self._peaks.get(subject, np.zeros(NUM_BLENDSHAPES, np.float32)).copy()

    def reset_peaks(self, subject: str | None = None) -> None:
        with self._lock:
            if subject is None:
                self._peaks.clear()
            else:
                self._peaks.pop(subject, None)

    def wrap(self, step):
        """`step` with every frame it gives tuned (one FaceFrame, or a list of them with several faces)."""
        def tuned(item):
            out = step(item)
            return [self.apply(f) for f in out] if isinstance(out, list) else self.apply(out)

        return tuned

    def apply(self, frame: FaceFrame) -> FaceFrame:
        """A new FaceFrame: `frame` with its subject's mapping and the head dead zone applied."""
        subject = frame.subject
        raw = np.asarray(frame.blendshapes, np.float32)
        mapping = self.mapping(subject)
        dead = self.head_dead_zone if self.head_dead_zone is not None else (mapping.head_dead_zone if mapping else 0.0)
        mapped = mapping.apply(raw) if mapping is not None and not mapping.identity else raw
        with self._lock:
            before = self._last.get(subject)
            if frame.face_found and before is not None:  # a weight counts once it held two frames
                held = np.minimum(before[0], raw)
                peak = self._peaks.get(subject)
                self._peaks[subject] = held if peak is None else np.maximum(peak, held)
            self._last[subject] = (raw.copy(), mapped) if frame.face_found else (np.zeros_like(raw), mapped)
        if mapped is raw and not dead:
            return frame
        changes = {}
        if mapped is not raw:
            changes["blendshapes"] = mapped
        if dead:
            head = np.asarray(frame.head_rotation, np.float32)
            held = self._held.get(subject)
            held = head.copy() if held is None else np.clip(held, head - dead, head + dead).astype(np.float32)
            self._held[subject] = held
            changes["head_rotation"] = held.copy()
        return dataclasses.replace(frame, **changes)

    # --- the monitor page's tuning panel --------------------------------------------------------------------------
    def view(self, subject: str) -> dict:
        """A subject's mapping, and what its weights read before and after it (last frame, and peaks)."""
        mapping = self.mapping(subject) or Mapping()
        with self._lock:
            raw, mapped = self._last.get(subject, (np.zeros(NUM_BLENDSHAPES), np.zeros(NUM_BLENDSHAPES)))
            peaks = self._peaks.get(subject, np.zeros(NUM_BLENDSHAPES))
        return {"subject": subject, "names": list(ARKIT_NAMES), "mapping": mapping.to_dict(),
                "raw": np.round(raw, 3).tolist(), "mapped": np.round(mapped, 3).tolist(),
                "peaks": np.round(peaks, 3).tolist(), "steps": [[prompt, list(names)] for prompt, names in STEPS]}

    def set_shape(self, subject: str, name: str, settings: dict) -> Mapping:
        """`name`'s settings changed for `subject` from the next frame on (checked as a mapping file's are)."""
        mapping = (self.mapping(subject) or Mapping()).with_shape(name, **settings)
        self.set_mapping(subject, mapping)
        return mapping

    def apply_ranges(self, subject: str) -> list:
        """Range calibration from the peaks since `reset_peaks`: each step's shapes get the gain that takes their
        peak to 1.0 (bridge/ranges.py); applied from the next frame on. Returns the RangeResults."""
        peaks = self.peaks(subject)
        mapping, results = ranges_from_peaks(self.mapping(subject) or Mapping(),
                                             {name: float(peaks[ARKIT_INDEX[name]]) for name in step_shapes()})
        self.set_mapping(subject, mapping)
        return results

    def save(self, subject: str, directory=None):
        """Store the subject's mapping in their calibration profile (a new profile holds no neutral offset)."""
        profile = CalibrationProfile.load(subject, directory) or CalibrationProfile(subject=subject)
        profile.mapping = (self.mapping(subject) or Mapping()).to_dict()
        return profile.save(directory)
