"""`facebridge calibrate`: record the subject's neutral face into their profile. Without --source it needs a
camera: calibrating from the bundled sample (someone else's face) happens only when asked with --source sample."""
from __future__ import annotations

import sys

from bridge.commands.run import add_pipeline_arguments, pipeline_options


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="store the subject's neutral face, applied on later runs",
                       description="Look at the camera with a relaxed, neutral face. FaceBridge measures it for a "
                                   "few seconds and stores it in the subject's profile; later runs subtract it so "
                                   "a neutral face streams as neutral.")
    add_pipeline_arguments(p)
    p.add_argument("--frames", type=int, default=60, metavar="N", help="frames to measure (default 60)")
    p.add_argument("--show", action="store_true", help="print the stored profile instead of calibrating")
    p.set_defaults(func=run)


def run(args) -> int:
    from bridge.calibration import CalibrationProfile
    from bridge.errors import FaceBridgeError
    from bridge.pipeline import FacePipeline
    from bridge.sources import open_source

    if args.show:
        profile = CalibrationProfile.load(args.subject)
        if profile is None:
            print(f"no profile for '{args.subject}'; run `facebridge calibrate --subject {args.subject}`")
            return 1
        print(f"{profile.path()}: {profile.frames} frames, identity {len(profile.identity)} coefficients")
        return 0
    if args.frames < 5:
        raise FaceBridgeError(f"--frames {args.frames} is too few to measure a neutral face", "use 30 or more")
    if args.source in (None, "", "auto"):
        from bridge.sources.camera import camera_available

        if not camera_available(0):
            raise FaceBridgeError("no camera found to calibrate from",
                                  "connect one, or pass --source camera:N, a video or image folder of the subject "
                                  "(--source sample calibrates from the bundled clip, for trying it out)")
        args.source = "camera:0"
    if args.source == "sample":
        print(f"note: calibrating '{args.subject}' from the bundled sample clip, as asked: that is not your "
              "face, so recalibrate from your camera before you perform", file=sys.stderr)
    pipeline = FacePipeline(pipeline_options(args), profile=None)
    frames = []
    with open_source(args.source, realtime=False, size=args.camera_size, fps=args.camera_fps,
                     mirror=args.mirror) as source:
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
