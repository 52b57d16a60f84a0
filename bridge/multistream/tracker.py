"""The face pipeline batched over many streams, with image pre-processing on the GPU (torch).

Per frame: the detector only for streams whose face is lost; for tracked streams the 468-point landmark model
on a rotated 192x192 crop, both irises as one batch on 64x64 eye crops, the emotion model on a 64x64 grey face
crop, and the expression regressor (ARKit-52) on the landmark features; then the next crop is taken from this
frame's landmarks. Every crop of a stage is one `grid_sample` over the whole batch.

Models run through runners, one per role (`face_runners.make_runners`): compiled torch modules or ONNX Runtime,
on the GPU or the CPU (which keeps this code testable without a GPU). With the torch-cuda runners,
`capture_cuda_graphs` turns a whole pass into one graph launch.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from bridge import mesh
from bridge.engines.shipped import find_model
from bridge.multistream.torch_runner import capture_graphs

LANDMARK_SIZE, EYE_SIZE, EMOTION_SIZE, DETECT_SIZE = 192, 64, 64, 128
# per eye, in ARKit's order like the single-face pipeline: subject's left eye (image right, mirrored for the iris
# model, which knows the subject's right eye only), then the subject's right eye
EYE_CORNERS = mesh.EYE_CORNERS
EYE_FLIP = (True, False)
FACE_SCALE, EYE_SCALE, EMOTION_SCALE = 1.5, 2.3, 1.1
PRESENCE_THRESHOLD, DETECT_THRESHOLD = 0.5, 0.5
# one row per frame, as `packed_results` lays it out for a single copy back to the host. Everything is in frame
# pixels and ARKit's eye order, as bridge.stages.landmarks gives it: landmarks with both lid contours taken from
# the iris model (as IrisResult.refine does), irises (2, 5, 3) centre first; expression_head is the expression
# model's own head-rotation output (yaw, pitch, roll degrees), when it has one
RESULT_FIELDS = (("tracked", ()), ("presence", ()), ("landmarks", (468, 3)), ("irises", (2, 5, 3)),
                 ("emotion", (7,)), ("blendshapes", (52,)), ("expression_head", (3,)))
RESULT_WIDTH = sum(math.prod(shape) for _, shape in RESULT_FIELDS)


def _detector_anchors(entry: dict):
    anchors_cfg = entry.get("postprocessing", {}).get("anchors", {"strides": [8, 16], "anchors_per_cell": [2, 6]})
    centers = []
    for stride, per_cell in zip(anchors_cfg["strides"], anchors_cfg["anchors_per_cell"]):
        cells = DETECT_SIZE // stride
        for row in range(cells):
            for col in range(cells):
                centers.extend([((col + 0.5) / cells, (row + 0.5) / cells)] * per_cell)
    return np.array(centers, dtype=np.float32)


class BatchedFaceTracker:
    """State for `num_streams` streams on one device; `step(frames, streams)` runs one batched pass."""

    def __init__(self, num_streams: int, frame_hw: tuple[int, int], runners: dict, device: str = "cuda",
                 detector: str = "face_detection_short_range", branches: bool = True):
        """branches: on a GPU, run the parts of a pass that do not wait for each other side by side on their own
        CUDA streams (see `_beside`); same results, a shorter pass on a GPU the pass alone leaves mostly idle."""
        # optional extra: torch (gpu), about 1.5 s to import
        import torch

        self.t = torch
        self.device = device
        self.runners = runners  # detector, landmarks, iris, emotion, expression -> runner (see make_runners)
        self.height, self.width = frame_hw
        self.num_streams = num_streams
        slots = num_streams + 1  # the last slot is scratch: padding rows and lost streams write there
        self.center = torch.zeros((slots, 2), device=device)
        self.size = torch.ones(slots, device=device)
        self.angle = torch.zeros(slots, device=device)
        self._tracked_all = torch.zeros(slots, dtype=torch.bool, device=device)
        self.anchors = torch.from_numpy(_detector_anchors(find_model(detector).entry)).to(device)
        self._last_landmarks_all = torch.zeros((slots, 468, 3), device=device)
        self._last_emotion_all = torch.zeros((slots, 7), device=device)
        self._last_iris_all = torch.zeros((slots, 2, 5, 3), device=device)  # frame pixels; eye 0 = subject's left
        self._last_blendshapes_all = torch.zeros((slots, 52), device=device)
        self._last_presence_all = torch.zeros(slots, device=device)
        self._last_expression_head_all = torch.zeros((slots, 3), device=device)
        # the pass number, and the pass each stream's frame last went to the detector: bounded detector slots go to
        # the lost streams that waited longest, so streams with no face in view (an empty chair) never keep the
        # others from being found again
        self._pass_number = torch.zeros((), dtype=torch.float64, device=device)
        self._detect_tried = torch.zeros(slots, dtype=torch.float64, device=device)
        # what callers read and write: one row per stream (views, without the scratch row)
        self.tracked = self._tracked_all[:num_streams]
        self.last_landmarks = self._last_landmarks_all[:num_streams]  # frame pixels x, y and relative depth
        self.last_emotion = self._last_emotion_all[:num_streams]
        self.last_iris = self._last_iris_all[:num_streams]
        self.last_blendshapes = self._last_blendshapes_all[:num_streams]
        self.last_presence = self._last_presence_all[:num_streams]
        self.last_expression_head = self._last_expression_head_all[:num_streams]
        # constants made once: creating them per pass would copy from the host (a sync, and not capturable)
        self._eye_corners = torch.tensor(EYE_CORNERS, device=device)
        self._eye_flip = torch.tensor(EYE_FLIP, device=device)
        self._contours = torch.tensor(mesh.EYE_CONTOURS, device=device)  # (2, 16) mesh points the iris lids replace
        self._grey = torch.tensor([0.299, 0.587, 0.114], device=device)[None, :, None, None]
        self._image_centre = torch.tensor([self.width / 2, self.height / 2], device=device)
        self._graphs = {}  # bucket -> captured pass (see capture_cuda_graphs)
        self._frame_buffer = self._streams_buffer = None
        self.focal = float(self.width)  # intrinsics unknown: the expression contract's default
        on_gpu = torch.device(device).type == "cuda"
        self.branches = bool(branches and on_gpu)
        self._side_streams = [torch.cuda.Stream(device) for _ in range(2)] if on_gpu else []
        self._forked = []  # side streams holding work of the pass being enqueued, joined at its end
        self.detector_runs = 0
        self.tracked_runs = 0

    # --- geometry ------------------------------------------------------------------------------------------
    def _grid(self, center, size, angle, out: int, flip=None):
        """Frame-pixel sample positions (N, out, out) x and y for rotated square crops (pixel i spans i..i+1)."""
        t = self.t
        lin = (t.arange(out, device=self.device, dtype=t.float32) + 0.5) / out - 0.5  # -0.5..0.5
        gy, gx = t.meshgrid(lin, lin, indexing="ij")
        gx = gx[None] * size[:, None, None]
        gy = gy[None] * size[:, None, None]
        if flip is not None:
            gx = t.where(flip[:, None, None], -gx, gx)
        cos, sin = t.cos(angle)[:, None, None], t.sin(angle)[:, None, None]
        return center[:, 0, None, None] + gx * cos - gy * sin, center[:, 1, None, None] + gx * sin + gy * cos

    def _crop(self, images, center, size, angle, out: int, flip=None, per_image: int = 1):
        """Bilinear crops (N * per_image, C, out, out) of images (N, C, H, W); zeros outside the frame.

        per_image > 1: that many crops of each image (both eyes), given in image order, sampled in one call
        by stacking their grids (grid_sample pairs grid n with image n)."""
        t = self.t
        x, y = self._grid(center, size, angle, out, flip)
        grid = t.stack([x * (2.0 / self.width) - 1, y * (2.0 / self.height) - 1], dim=-1)
        n = images.shape[0]
        grid = grid.reshape(n, per_image * out, out, 2)
        crops = t.nn.functional.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        if per_image == 1:
            return crops
        return crops.reshape(n, -1, per_image, out, out).transpose(1, 2).reshape(n * per_image, -1, out, out)

    def _to_image(self, points, center, size, angle, out: int):
        """Crop-pixel points (N, P, >=2) back to frame pixels."""
        t = self.t
        u = (points[..., 0] / out - 0.5) * size[:, None]
        v = (points[..., 1] / out - 0.5) * size[:, None]
        cos, sin = t.cos(angle)[:, None], t.sin(angle)[:, None]
        return t.stack([center[:, 0, None] + u * cos - v * sin, center[:, 1, None] + u * sin + v * cos], dim=-1)

    @contextlib.contextmanager
    def _beside(self, branch: int):
        """Enqueue the block's kernels on side stream `branch`, forked from the current stream: a branch of the
        pass's graph that runs beside what the current stream does next, joined back by `_join`. Inline (the
        current stream) on the CPU or with branches off. Every tensor the block reads must stay referenced until
        the join is enqueued (locals of the pass do), or the allocator could hand its memory on too early."""
        if not self.branches:
            yield
            return
        t = self.t
        side = self._side_streams[branch]
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            yield
        self._forked.append(side)

    def _join(self) -> None:
        """The current stream waits for every branch forked since the last join (a capture must end joined)."""
        for side in self._forked:
            self.t.cuda.current_stream().wait_stream(side)
        self._forked = []

    # --- CUDA graphs of the steady state ------------------------------------------------------------------
    def capture_cuda_graphs(self, buckets: list[int], detect_fraction: float = 1 / 16, min_detect: int = 2) -> None:
        """Capture the whole pass once per batch bucket: a pass is then one copy in, one graph launch and no
        host round trip at all (no launch cost per kernel, no sync to learn how many faces were lost).

        That needs a fixed amount of detector work per pass: each captured pass runs the detector on
        `detect_slots[bucket]` frames (ceil(bucket * detect_fraction), at least `min_detect`), picked on the
        device among the streams whose face is lost, those that waited longest first. Lost streams beyond that
        wait for a later pass and are not tracked meanwhile. Needs runners that can run inside a capture (the
        torch runners). A pass of n frames replays the next bucket up; padding rows write to the scratch slot.
        """
        t = self.t
        if self.device == "cpu" or not all(hasattr(r, "eager") for r in self.runners.values()):
            raise ValueError("CUDA-graph capture of the pass needs the torch-cuda runners")
        buckets = sorted({min(b, self.num_streams) for b in buckets})
        self.detect_slots = {b: min(b, max(min_detect, math.ceil(b * detect_fraction))) for b in buckets}
        largest = buckets[-1]
        # the graphs' inputs: they must outlive the graphs (see capture_graphs)
        self._frame_buffer = t.zeros((largest, self.height, self.width, 3), dtype=t.uint8, device=self.device)
        self._streams_buffer = t.full((largest,), self.num_streams, dtype=t.long, device=self.device)
        graphs = capture_graphs(buckets, lambda b: self._pass(self._frame_buffer[:b], self._streams_buffer[:b],
                                                              self.detect_slots[b], eager=True))
        self._graphs = {b: graph for b, (graph, _) in graphs.items()}

    def release_cuda_graphs(self) -> None:
        """Back to eager passes (same results, more host work); frees the graphs' memory pool."""
        self._graphs = {}
        self._frame_buffer = self._streams_buffer = None

    def frame_buffer(self, n: int):
        """Where to put the next pass's n frames to save the tracker a copy (None without captured graphs)."""
        if self._frame_buffer is None or n > self._frame_buffer.shape[0]:
            return None
        return self._frame_buffer[:n]

    def packed_results(self, streams):
        """(len(streams), RESULT_WIDTH) float rows in RESULT_FIELDS order, on the device: one copy brings a pass's
        results to the host."""
        t = self.t
        return t.cat([self.tracked[streams].float()[:, None], self.last_presence[streams][:, None],
                      self.last_landmarks[streams].flatten(1), self.last_iris[streams].flatten(1),
                      self.last_emotion[streams], self.last_blendshapes[streams], self.last_expression_head[streams]],
                     dim=1)

    def _replay(self, frames_u8, streams) -> bool:
        n = len(streams)
        bucket = next((b for b in sorted(self._graphs) if b >= n), None)
        if bucket is None:
            return False
        if frames_u8.data_ptr() != self._frame_buffer.data_ptr():
            self._frame_buffer[:n].copy_(frames_u8)
        self._streams_buffer[:n].copy_(streams)
        self._streams_buffer[n:bucket].fill_(self.num_streams)
        self._graphs[bucket].replay()
        self.detector_runs += self.detect_slots[bucket]
        return True

    # --- one pass ------------------------------------------------------------------------------------------
    def step(self, frames_u8, streams, detect_slots: int | None = None) -> None:
        """frames_u8: (B, H, W, 3) uint8 on the device, one frame per stream in `streams` (LongTensor).

        After the pass, `tracked` says which streams have a face; their `last_*` rows hold this frame's
        results. A stream whose face is lost keeps its last results. Without captured graphs the detector runs
        for every lost stream, or for at most `detect_slots` of them (bounded work per pass, no host sync)."""
        with self.t.inference_mode():
            self.tracked_runs += len(streams)
            if not self._replay(frames_u8, streams):
                if detect_slots is not None:
                    detect_slots = min(detect_slots, len(streams))
                    self.detector_runs += detect_slots
                self._pass(frames_u8, streams, detect_slots)

    def _pass(self, frames_u8, streams, detect_slots: int | None, eager: bool = False) -> None:
        """Detect where the face is lost, then track. detect_slots None: every lost stream, now (costs a host
        sync); else that many detector rows picked on the device, the lost streams that waited longest first
        (capturable)."""
        t = self.t
        lost = ~self._tracked_all[streams]
        if detect_slots is None:
            if bool(lost.any()):
                self._detect(frames_u8[lost], streams[lost])
        else:
            self._pass_number += 1
            # rank: the lost streams by how many passes since their last try (a new stream's is its first), the
            # rest after them (a slot beyond the lost goes harmlessly to a tracked or padding row)
            waited = self._pass_number - self._detect_tried[streams]
            rank = t.where(lost & (streams < self.num_streams), waited, -1.0)
            pick = rank.topk(detect_slots).indices
            self._detect_tried[streams[pick]] = self._pass_number
            self._detect(frames_u8[pick], streams[pick], only=lost[pick], eager=eager)
        self._track(frames_u8, streams, eager)

    def _detect(self, frames_u8, streams, only=None, eager: bool = False) -> None:
        """BlazeFace on whole frames; a found face starts tracking. only: the rows whose result counts."""
        t = self.t
        if only is None:
            self.detector_runs += len(streams)
        images = frames_u8.permute(0, 3, 1, 2).float() * (1.0 / 255.0)
        h, w = self.height, self.width
        scale = DETECT_SIZE / max(h, w)
        nh, nw = round(h * scale), round(w * scale)
        resized = t.nn.functional.interpolate(images, size=(nh, nw), mode="bilinear", align_corners=False)
        top, left = (DETECT_SIZE - nh) // 2, (DETECT_SIZE - nw) // 2
        boxed = t.zeros((images.shape[0], 3, DETECT_SIZE, DETECT_SIZE), device=self.device)
        boxed[:, :, top:top + nh, left:left + nw] = resized * 2 - 1
        detector = self.runners["detector"]
        regressors, scores = (detector.eager(boxed) if eager else detector(boxed))[:2]
        best = scores[..., 0].argmax(dim=1)
        score = t.sigmoid(scores[t.arange(len(best), device=self.device), best, 0].clamp(-80, 80))
        reg = regressors[t.arange(len(best), device=self.device), best] / DETECT_SIZE
        anchor = self.anchors[best]
        cx, cy = anchor[:, 0] + reg[:, 0], anchor[:, 1] + reg[:, 1]
        eyes = anchor[:, None, :] + reg[:, 4:8].view(-1, 2, 2)
        to_px = lambda v, off: (v * DETECT_SIZE - off) / scale  # noqa: E731 letterbox back to the frame
        center = t.stack([to_px(cx, left), to_px(cy, top)], dim=1)
        side = t.maximum(reg[:, 2], reg[:, 3]) * DETECT_SIZE / scale * FACE_SCALE
        eye_px = t.stack([to_px(eyes[..., 0], left), to_px(eyes[..., 1], top)], dim=-1)
        angle = t.atan2(eye_px[:, 1, 1] - eye_px[:, 0, 1], eye_px[:, 1, 0] - eye_px[:, 0, 0])
        found = score > DETECT_THRESHOLD
        if only is not None:  # rows picked only to fill the slots must not touch their stream's state
            found = found & only
            streams = t.where(only, streams, self.num_streams)
        self.center[streams] = t.where(found[:, None], center, self.center[streams])
        self.size[streams] = t.where(found, side, self.size[streams])
        self.angle[streams] = t.where(found, angle, self.angle[streams])
        self._tracked_all[streams] = found

    def _track(self, frames_u8, streams, eager: bool = False) -> None:
        """Landmarks, irises, expression and emotion for frames_u8[i] of stream streams[i].
        eager: run the models as plain modules (inside a graph capture) rather than through their own graphs."""
        t = self.t
        n = len(streams)
        # one float copy of the frames (channels_last, as the uint8 frames lie), 0..255: crops scale themselves
        images = frames_u8.permute(0, 3, 1, 2).float()

        def run(role, x):
            return self.runners[role].eager(x) if eager else self.runners[role](x)

        center, size, angle = self.center[streams], self.size[streams], self.angle[streams]
        streams = t.where(self._tracked_all[streams], streams, self.num_streams)  # lost: results go to scratch
        crops = self._crop(images, center, size, angle, LANDMARK_SIZE) * (1.0 / 255.0)
        mesh_out, presence = run("landmarks", crops)[:2]
        points = mesh_out.reshape(n, 468, 3)
        xy = self._to_image(points, center, size, angle, LANDMARK_SIZE)
        probability = t.sigmoid(presence.reshape(n).float())
        present = probability > PRESENCE_THRESHOLD
        depth = points[..., 2:] * (size / LANDMARK_SIZE)[:, None, None]

        with self._beside(1):  # beside the irises and all after them: it needs only the face mesh
            # next crop from this frame's (unrefined) landmarks: their extent in the eye-levelled frame, 1.5x
            # (bridge.stages.landmarks.roi_from_landmarks)
            le, re = xy[:, 33], xy[:, 263]
            new_angle = t.atan2(re[:, 1] - le[:, 1], re[:, 0] - le[:, 0])
            cos, sin = t.cos(new_angle)[:, None], t.sin(new_angle)[:, None]
            centre0 = (xy.min(dim=1).values + xy.max(dim=1).values) / 2
            dx, dy = xy[..., 0] - centre0[:, :1], xy[..., 1] - centre0[:, 1:]
            u, v = dx * cos + dy * sin, -dx * sin + dy * cos
            ulo, uhi, vlo, vhi = u.min(1).values, u.max(1).values, v.min(1).values, v.max(1).values
            mu, mv = (ulo + uhi)[:, None] / 2, (vlo + vhi)[:, None] / 2
            new_center = centre0 + t.cat([mu * cos - mv * sin, mu * sin + mv * cos], 1)
            new_size = t.maximum(uhi - ulo, vhi - vlo) * FACE_SCALE
            self.center[streams] = new_center
            self.size[streams] = new_size.clamp(min=8.0)
            self.angle[streams] = new_angle

        # irises: both eyes of every face in one batch, each crop levelled on its own corners, the subject's left
        # eye mirrored (bridge.stages.landmarks.IrisLandmarker.eye_roi)
        a, b = xy[:, self._eye_corners[:, 0]], xy[:, self._eye_corners[:, 1]]  # (n, 2 eyes, 2)
        d = b - a
        d = t.where(d[..., :1] < 0, -d, d)  # angle of the corner line read left to right
        eye_angle = t.atan2(d[..., 1], d[..., 0]).reshape(2 * n)
        eye_center = ((a + b) / 2).reshape(2 * n, 2)
        eye_side = (t.linalg.norm(b - a, dim=-1) * EYE_SCALE).reshape(2 * n)
        flip = self._eye_flip.repeat(n)
        eye_crops = self._crop(images, eye_center, eye_side, eye_angle, EYE_SIZE, flip, per_image=2) * (1.0 / 255.0)
        contours, iris = run("iris", eye_crops)[:2]
        eye_px = self._eye_to_image(t.cat([iris.reshape(2 * n, 5, 3), contours.reshape(2 * n, 71, 3)[:, :16]], 1),
                                    eye_center, eye_side, eye_angle, flip)
        self._last_iris_all[streams] = eye_px[:, :5].reshape(n, 2, 5, 3)
        lids = eye_px[:, 5:, :2].reshape(n, 2 * 16, 2)
        refined = xy.clone()
        refined[:, self._contours.reshape(-1)] = lids  # the iris model's lids: blinks the face mesh alone misses
        self._last_landmarks_all[streams] = t.cat([refined, depth], -1)
        self._last_presence_all[streams] = probability

        # from the refined landmarks on, two branches: the emotion crop and model beside, the expression
        # regressor on the current stream
        with self._beside(0):
            # emotion: grey, eye-levelled face crop over the refined landmarks, 1.1x (EmotionClassifier.face_roi)
            lo, hi = refined.min(dim=1).values, refined.max(dim=1).values
            le, re = refined[:, 33], refined[:, 263]
            face_angle = t.atan2(re[:, 1] - le[:, 1], re[:, 0] - le[:, 0])
            face = self._crop(images, (lo + hi) / 2, (hi - lo).max(dim=1).values * EMOTION_SCALE, face_angle,
                              EMOTION_SIZE)
            grey = (face * self._grey).sum(1, True) * (1.0 / 255.0)
            self._last_emotion_all[streams] = run("emotion", grey * 2 - 1)[0]

        if "expression" in self.runners:  # subject's left eye first, as the contract says
            iris_xy = eye_px[:, 0, :2].reshape(n, 2, 2)
            outputs = run("expression", landmark_features_torch(refined, iris_xy, self.focal, self._image_centre))
            self._last_blendshapes_all[streams] = outputs[0]
            if len(outputs) > 1:
                self._last_expression_head_all[streams] = outputs[1][:, :3]
        self._tracked_all[streams] = present
        self._join()

    def _eye_to_image(self, points, center, size, angle, flip):
        """Eye-crop points (2n, P, 3) to frame pixels, mirrored crops un-mirrored; z scaled like x."""
        t = self.t
        x = t.where(flip[:, None], EYE_SIZE - points[..., 0], points[..., 0])
        xy = self._to_image(t.stack([x, points[..., 1]], -1), center, size, angle, EYE_SIZE)
        return t.cat([xy, points[..., 2:] * (size / EYE_SIZE)[:, None, None]], -1)


def landmark_features_torch(xy, iris_xy, focal: float, centre):
    """bridge.expression.features.features_batch ("landmarks-2d-v1", 944 values) on the GPU, iris present.
    centre: the image centre (x, y), as a tensor on xy's device (or a pair of floats)."""
    # optional extra: torch (gpu), about 1.5 s to import
    import torch

    mean = xy.mean(dim=1, keepdim=True)
    centred = xy - mean
    s = centred.pow(2).sum(-1).mean(-1).sqrt()[:, None, None]
    n = xy.shape[0]
    centre_t = centre if torch.is_tensor(centre) else torch.tensor(centre, device=xy.device, dtype=xy.dtype)
    return torch.cat([(centred / s).reshape(n, -1), ((iris_xy - mean) / s).reshape(n, -1),
                      torch.ones((n, 1), device=xy.device, dtype=xy.dtype),
                      (mean[:, 0, :] - centre_t) / focal, s[:, 0, :] / focal], dim=1)
