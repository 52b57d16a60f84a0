"""`facebridge calibrate`: record the subject's neutral face into their profile. Without --source it needs a
camera: calibrating from the bundled sample (someone else's face) happens only when asked with --source sample."""
from __future__ import annotations

import json
import sys
import time

from bridge.calibration import CalibrationProfile
from bridge.commands.run import add_pipeline_arguments, pipeline_options
from bridge.errors import FaceBridgeError
from bridge.mapping import load_mapping, parse_mapping


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="store the subject's neutral face, applied on later runs",
                       description="Look at the camera with a relaxed, neutral face. FaceBridge measures it for a "
                                   "few seconds and stores it in the subject's profile; later runs subtract it so "
                                   "a neutral face streams as neutral.")
    add_pipeline_arguments(p)
    p.add_argument("--frames", type=int, default=60, metavar="N", help="frames to measure (default 60)")
    p.add_argument("--show", action="store_true", help="print the stored profile instead of calibrating")
    p.add_argument("--ranges", action="store_true",
                   help="range calibration instead of the neutral face: walk through blink, smile, jaw open, brows "
                        "up and down, pucker, cheek puff and looks left/right/up/down; each blendshape's gain is set "
                        "so your full expression reaches 1.0 (stored in the profile's mapping). With --source FILE "
                        "the clip holds every expression and each shape takes its peak from all of it")
    p.add_argument("--mapping", metavar="FILE.json",
                   help="store this blendshape mapping (docs/MAPPING.md) in the subject's profile, used by later "
                        "runs")
    p.set_defaults(func=run)


def run(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.pipeline import FacePipeline
    from bridge.sources import open_source

    if args.show:
        profile = CalibrationProfile.load(args.subject)
        if profile is None:
            print(f"no profile for '{args.subject}'; run `facebridge calibrate --subject {args.subject}`")
            return 1
        print(f"{profile.path()}: {profile.frames} frames, identity {len(profile.identity)} coefficients")
        if profile.mapping:
            print(f"mapping (docs/MAPPING.md): {json.dumps(profile.mapping)}")
        return 0
    if args.mapping:
        return store_mapping(args.subject, args.mapping)
    if args.ranges:
        return calibrate_ranges(args)
    if args.frames < 5:
        raise FaceBridgeError(f"--frames {args.frames} is too few to measure a neutral face", "use 30 or more")
    if args.source in (None, "", "auto"):
        # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
        from bridge.sources.camera import camera_available

        if not camera_available(0):
            raise FaceBridgeError("no camera found to calibrate from",
                                  "connect one, or pass --source camera:N, a video or image folder of the subject "
                                  "(--source sample calibrates from the bundled clip, for trying it out)")
        args.source = "camera:0"
    if args.source == "sample":
        print(f"note: calibrating '{args.subject}' from the bundled sample clip, as asked: that is not your "
              "face, so recalibrate from your camera before you perform", file=sys.stderr)
    frames = []
    # the source first: a wrong path or a busy camera is said before the models load
    with open_source(args.source, realtime=False, size=args.camera_size, fps=args.camera_fps,
                     mirror=args.mirror) as source:
        pipeline = FacePipeline(pipeline_options(args), profile=None)
        print(f"calibrating '{args.subject}' from {source.name}: hold a relaxed, neutral face...", file=sys.stderr)
        while len(frames) < args.frames:
            frame = source.read()
            if frame is None:
                break
            frames.append(pipeline.process(frame))
            print(f"\r  {len(frames)}/{args.frames} frames", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    profile = CalibrationProfile.from_frames(args.subject, frames, pipeline.expression.identity)
    path = profile.save()
    print(f"saved calibration for '{args.subject}' ({profile.frames} frames) to {path}")
    return 0


def _profile_or_new(subject: str):
    """The subject's stored profile, or a new one holding no neutral offset (a mapping alone changes nothing else)."""
    return CalibrationProfile.load(subject) or CalibrationProfile(subject=subject)


def store_mapping(subject: str, path: str) -> int:
    mapping = load_mapping(path)
    profile = _profile_or_new(subject)
    profile.mapping = mapping.to_dict()
    saved = profile.save()
    print(f"stored the mapping of {path} for '{subject}' in {saved}")
    return 0


def calibrate_ranges(args) -> int:
    """Walk the user through the expressions (a camera) or read a clip that holds them all (a file), then store
    the gains in the subject's mapping (bridge/ranges.py)."""
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.pipeline import FacePipeline
    from bridge.ranges import STEP_SECONDS, STEPS, ranges_from_frames, step_shapes
    from bridge.sources import open_source

    profile = _profile_or_new(args.subject)
    mapping = parse_mapping(profile.mapping or {}, f"of {args.subject}'s profile")
    pipeline = FacePipeline(pipeline_options(args), profile=profile if profile.frames else None)
    source_spec = args.source or "camera:0"
    if source_spec == "sample":
        print(f"note: range calibration of '{args.subject}' from the bundled sample clip, as asked: that is not "
              "your face, so calibrate from your camera before you perform", file=sys.stderr)
    steps = []
    with open_source(source_spec, realtime=False, size=args.camera_size, fps=args.camera_fps,
                     mirror=args.mirror) as source:
        if not source.live:  # a clip that holds every expression: one step for all the shapes
            frames = []
            while (frame := source.read()) is not None and len(frames) < 20 * 60 * 60:
                out = pipeline.process(frame)
                if out.face_found:
                    frames.append(out.blendshapes)
            print(f"measured {len(frames)} frames with a face from {source.name}", file=sys.stderr)
            steps.append((step_shapes(), frames))
        else:
            for prompt, names in STEPS:
                print(f"now {prompt}, and hold it...", file=sys.stderr, flush=True)
                frames, end = [], time.monotonic() + STEP_SECONDS
                while time.monotonic() < end and (frame := source.read()) is not None:
                    out = pipeline.process(frame)
                    if out.face_found:
                        frames.append(out.blendshapes)
                steps.append((names, frames))
    if not any(frames for _, frames in steps):
        raise FaceBridgeError("no face was found in the range calibration's frames",
                              "face the camera in good light (or give a clip that shows the face) and try again")
    mapping, results = ranges_from_frames(mapping, steps)
    for r in results:
        what = f"gain {r.gain:g}" if r.gain is not None else "not seen, gain kept"
        print(f"  {r.name:<18} peak {r.peak:.2f}  {what}")
    profile.mapping = mapping.to_dict()
    saved = profile.save()
    print(f"saved the ranges of '{args.subject}' to {saved}")
    return 0
