"""`facebridge bench detectors`: which faces each way of running BlazeFace finds, and its CPU time a frame
(issue 37: small faces and several people; the figures behind bridge/stages/search.py, in docs/FACE.md).

Ways: the short-range detector (128x128) and the full-range one (192x192) on the whole letterboxed frame; each
over square tiles of the frame's shorter side (overlapping, one run a tile, merged by the same non-max
suppression); and `auto wide`, what `--detector auto` runs when it looks for small faces (short range, then full
range when that found fewer than asked). A face counts as found when a detection overlaps its box by IoU 0.25.

Sets: the hand-labelled faces of the real stills (bridge/bench/real_face_labels.json: their boxes) and every
30th frame of the real clips (a face found at all), from --data (tools/fetch_real_data.py; skipped and said when
missing); the bundled sample beside its mirror image (960x360, faces about 95 px); two copies of the sample on a
1280x720 frame, each face a given share of its width; the sample enlarged until its face fills a 640x480 frame.
The reference box of the sample's face is the short-range detection on its own 480x360 frame.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import cv2
import numpy as np

from bridge.bench.common import positive_int, reporter, table
from bridge.bench.faces import LABELS
from bridge.engines.shipped import sample_frames
from bridge.paths import real_data_dir

WAYS = ("short", "full", "short tiles", "full tiles", "auto wide")
WIDE_SHARES = (0.06, 0.08, 0.10, 0.13)  # face width / 1280x720 frame width
CLOSE_SHARES = (0.75, 0.9)  # face width / 640x480 frame width
IOU = 0.25
CLIP_STEP = 30
_say = reporter("detectors")


def add_arguments(p) -> None:
    p.add_argument("--data", default=str(real_data_dir()),
                   help="folder filled by tools/fetch_real_data.py (default: the user's cache, %(default)s)")
    p.add_argument("--backend", default="onnxruntime", help="inference backend of both detectors")
    p.add_argument("--frames", type=positive_int, default=60, help="sample frames per synthetic set (default 60)")
    p.add_argument("--repeats", type=positive_int, default=30, help="timed runs per way and frame size (default 30)")


def tiles(width: int, height: int) -> list[tuple[int, int, int]]:
    """(x, y, side) of the fewest squares of the shorter side that cover the frame, evenly overlapping."""
    side = min(width, height)
    count = int(np.ceil(max(width, height) / side))
    starts = np.linspace(0, max(width, height) - side, count).round().astype(int) if count > 1 else [0]
    return [(int(s), 0, side) if width >= height else (0, int(s), side) for s in starts]


def over_tiles(detector, image: np.ndarray, max_faces: int):
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.stages.detection import weighted_nms

    found = []
    for x, y, side in tiles(image.shape[1], image.shape[0]):
        for d in detector.detect(image[y:y + side, x:x + side], max_faces):
            found.append((d.box + [x, y, x, y], d.keypoints + [x, y], d.score))
    if not found:
        return []
    boxes, kps, scores = (np.array(v) for v in zip(*found))
    return weighted_nms(boxes, kps, scores, max_faces, detector.iou_threshold)


def ways(backend: str) -> dict:
    """Way -> find(image, max_faces) -> detections."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.stages.search import FaceSearch

    search = FaceSearch("auto", backend=backend)
    near, far = search.near, search.far
    return {"short": near.detect, "full": far.detect, "short tiles": lambda im, n: over_tiles(near, im, n),
            "full tiles": lambda im, n: over_tiles(far, im, n),
            "auto wide": lambda im, n: search.find(im, n, wide=True)}, near


def _hit(box, detections) -> bool:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.stages.detection import _iou

    box = np.asarray(box, np.float64)
    return any(_iou(box, d.box[None])[0] >= IOU for d in detections)


def side_by_side(image: np.ndarray, box: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    w = image.shape[1]
    return np.hstack([image, cv2.flip(image, 1)]), [box, np.array([2 * w - box[2], box[1], 2 * w - box[0], box[3]])]


def two_on_wide(image: np.ndarray, box: np.ndarray, share: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """Two copies of the sample (the right one mirrored), each face `share` of a 1280x720 frame's width."""
    k = share * 1280 / (box[2] - box[0])
    small = cv2.resize(image, None, fx=k, fy=k, interpolation=cv2.INTER_AREA)
    h, w = min(small.shape[0], 720), min(small.shape[1], 640)
    y = (720 - h) // 2
    canvas = np.full((720, 1280, 3), 90, np.uint8)
    canvas[y:y + h, (640 - w) // 2:(640 - w) // 2 + w] = small[:h, :w]
    canvas[y:y + h, 640 + (640 - w) // 2:640 + (640 - w) // 2 + w] = cv2.flip(small, 1)[:h, small.shape[1] - w:]
    left = box * k + [(640 - w) // 2, y, (640 - w) // 2, y]
    x = 640 + (640 - w) // 2 - (small.shape[1] - w)
    right = np.array([small.shape[1] - box[2] * k, box[1] * k, small.shape[1] - box[0] * k, box[3] * k]) + [x, y, x, y]
    return canvas, [left, right]


def close_up(image: np.ndarray, box: np.ndarray, share: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sample enlarged until its face is `share` of a 640x480 frame's width, the face centred."""
    k = share * 640 / (box[2] - box[0])
    big = cv2.resize(image, None, fx=k, fy=k)
    x0 = int((box[0] + box[2]) / 2 * k - 320)
    y0 = int(max(0, (box[1] + box[3]) / 2 * k - 240))
    canvas = np.zeros((480, 640, 3), np.uint8)
    crop = big[y0:y0 + 480, x0:x0 + 640]
    canvas[:crop.shape[0], :crop.shape[1]] = crop
    return canvas, [box * k - [x0, y0, x0, y0]]


def _real_sets(data: Path) -> tuple[list, list]:
    """([(photo, [labelled boxes])], [clip frames]) of the real corpus in `data` (empty where missing)."""
    labels = json.loads(LABELS.read_text())
    stills: dict[str, list] = {}
    for still in labels["stills"]:
        stills.setdefault(still["file"], []).append(still["box"])
    photos = [(cv2.imread(str(data / f)), boxes) for f, boxes in stills.items() if (data / f).is_file()]
    clip_frames = []
    for video in labels["videos"]:
        if not (data / video["file"]).is_file():
            continue
        cap = cv2.VideoCapture(str(data / video["file"]))
        i = 0
        while True:
            ok, image = cap.read()
            if not ok:
                break
            if i % CLIP_STEP == 0:
                clip_frames.append(image)
            i += 1
        cap.release()
    return photos, clip_frames


def _recall(find, items) -> list[int]:
    """[faces found, faces] over (image, boxes) items."""
    found = sum(_hit(box, find(image, max(2, len(boxes)) * 4)) for image, boxes in items for box in boxes)
    return [int(found), sum(len(boxes) for _, boxes in items)]


def _cpu_ms(find, image: np.ndarray, repeats: int) -> float:
    find(image, 2)
    start = time.thread_time()
    for _ in range(repeats):
        find(image, 2)
    return round((time.thread_time() - start) / repeats * 1e3, 2)


def run(args) -> dict:
    found, near = ways(args.backend)
    frames = [cv2.cvtColor(f, cv2.COLOR_RGB2BGR) for f in sample_frames(args.frames, step=1)]  # OpenCV's BGR
    refs = [near.detect(f)[0].box for f in frames]  # the sample's face on its own frame
    photos, clip_frames = _real_sets(Path(args.data))
    if not photos:
        _say(f"the real corpus is not in {args.data}: real sets skipped (python tools/fetch_real_data.py)")
    sets = {"960x360 side by side": [side_by_side(f, b) for f, b in zip(frames, refs)]}
    sets |= {f"1280x720 two faces at {s:.0%}": [two_on_wide(f, b, s) for f, b in zip(frames[::3], refs[::3])]
             for s in WIDE_SHARES}
    sets |= {f"640x480 close-up at {s:.0%}": [close_up(f, b, s) for f, b in zip(frames[::3], refs[::3])]
             for s in CLOSE_SHARES}
    sizes = {"480x360": frames[0], "960x360": sets["960x360 side by side"][0][0],
             "1280x720": sets["1280x720 two faces at 10%"][0][0]}
    results = {}
    for way, find in found.items():
        _say(f"{way}")
        r = {"real stills (labelled faces)": _recall(find, photos) if photos else None,
             "real clip frames with a face": [sum(bool(find(im, 1)) for im in clip_frames), len(clip_frames)]
             if clip_frames else None}
        r |= {name: _recall(find, items) for name, items in sets.items()}
        r["cpu_ms"] = {size: _cpu_ms(find, image, args.repeats) for size, image in sizes.items()}
        results[way] = r
    return {"backend": args.backend, "iou": IOU, "clip_step": CLIP_STEP, "sample_frames": len(frames),
            "ways": results}


def summary(results: dict) -> str:
    """One row per set (faces found of faces) and per frame size (CPU ms a frame), one column per way."""
    ways_ = results["ways"]
    first = next(iter(ways_.values()))
    rows = [[name] + [f"{r[name][0]}/{r[name][1]}" if r[name] else None for r in ways_.values()]
            for name in first if name != "cpu_ms"]
    rows += [[f"CPU ms a frame, {size}"] + [r["cpu_ms"][size] for r in ways_.values()] for size in first["cpu_ms"]]
    return table(["set"] + list(ways_), rows)
