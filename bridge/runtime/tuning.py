"""Tuning: each subject's blendshape mapping (bridge/mapping.py) applied to every frame after calibration and before
every output, and the head's dead zone.

It wraps the describing step (inside the output guard, so a frame the guard repeats is never mapped twice), so
Live Link Face, VMC, iFacialMocap, gRPC, the take (and so USD) and the monitor all see the same mapped frame. A
mapped frame is a new FaceFrame: the describer keeps its own (unmapped) frame for what a lost face relaxes from.
The mapping in use can be replaced while the stream runs (`set_mapping`, the monitor page); the next frame takes
it. What each subject's weights reached before mapping is kept (`peaks`), for range calibration and for the page's
peak-hold markers.

The head dead zone is a backlash per angle: the output holds still until the measured angle is more than the dead
zone away from it, then follows at that distance. It removes a still head's jitter without a jump when the head
starts moving.
"""
from __future__ import annotations

import dataclasses
import threading

import numpy as np

from bridge.frame import NUM_BLENDSHAPES, FaceFrame
from bridge.mapping import Mapping


class Tuning:
    """The run's mappings by subject (a subject without one uses `default`), and their state."""

    def __init__(self, mappings: dict[str, Mapping] | None = None, default: Mapping | None = None,
                 head_dead_zone: float | None = None) -> None:
        self.mappings = dict(mappings or {})
        self.default = default
        self.head_dead_zone = head_dead_zone  # degrees; None: each mapping's own
        self._held: dict[str, np.ndarray] = {}
        self._peaks: dict[str, np.ndarray] = {}  # subject -> the highest weight before mapping, since reset_peaks
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
        if frame.face_found:
            with self._lock:
                peak = self._peaks.get(subject)
                self._peaks[subject] = frame.blendshapes.copy() if peak is None else np.maximum(peak, frame.blendshapes)
        mapping = self.mapping(subject)
        dead = self.head_dead_zone if self.head_dead_zone is not None else (mapping.head_dead_zone if mapping else 0.0)
        if (mapping is None or mapping.identity) and not dead:
            return frame
        changes = {}
        if mapping is not None and not mapping.identity:
            changes["blendshapes"] = mapping.apply(frame.blendshapes)
        if dead:
            head = np.asarray(frame.head_rotation, np.float32)
            held = self._held.get(subject)
            held = head.copy() if held is None else np.clip(held, head - dead, head + dead).astype(np.float32)
            self._held[subject] = held
            changes["head_rotation"] = held.copy()
        return dataclasses.replace(frame, **changes)
