"""`facebridge replay TAKE`: stream a recorded take to Live Link Face and/or VMC receivers at its original
timing (frame capture-time deltas divided by --speed), once or in a loop."""
from __future__ import annotations

import math
import sys
import time

from bridge import ports
from bridge.errors import FaceBridgeError
from bridge.sinks.base import Sink


def add_parser(sub) -> None:
    p = sub.add_parser(
        "replay", help="stream a recorded take to Unreal (Live Link Face) and VMC receivers",
        description="Stream a take recorded with `facebridge run --record DIR` to Unreal's Live Link Face "
                    "source and/or a VMC receiver, at the timing it was captured with.")
    p.add_argument("take", metavar="TAKE", help="the take directory (holds frames.jsonl and take.json)")
    p.add_argument("--llf", metavar="HOST:PORT", action="append",
                   help="Live Link Face receiver (Unreal), or 'off'; repeat it for several (default: 127.0.0.1:11111)")
    p.add_argument("--vmc", metavar="HOST:PORT", default=ports.VMC,
                   help="VMC receiver (VSeeFace, VNyan, Warudo, ...), or 'off' (default: %(default)s)")
    p.add_argument("--vmc-no-bundle", action="store_true",
                   help="send VMC messages one per datagram, for receivers that cannot read OSC bundles")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed factor (default: 1.0)")
    p.add_argument("--loop", action="store_true", help="start again from the first frame at the end (Ctrl-C stops)")
    p.add_argument("--original-timecode", action="store_true",
                   help="send the recorded capture timecode instead of the time of replay")
    p.add_argument("--subject", help="send under this subject name instead of the recorded one")
    p.add_argument("--repair", action="store_true",
                   help="first make a take that was killed whole again: rebuild its take.json and frames.csv "
                        "from the frames frames.jsonl holds")
    p.set_defaults(func=run)


def open_sinks(args) -> list[Sink]:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.runtime.session import OutputConfig, address_or_off, llf_targets, open_sinks

    outputs = OutputConfig(llf=llf_targets(args.llf, ports.LIVE_LINK_FACE), llf_subject=args.subject,
                           vmc=address_or_off(args.vmc), vmc_bundle=not args.vmc_no_bundle)
    if not (outputs.llf or outputs.vmc):
        raise FaceBridgeError("both --llf and --vmc are off, nothing to send to",
                              "give at least one receiver, for example --llf 127.0.0.1:11111")
    return open_sinks(outputs)


class Progress:
    """One status line on stderr: rewritten in place on a terminal, a new line every few seconds otherwise."""

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.tty = stream.isatty()
        self.interval = 0.25 if self.tty else 5.0
        self.last = -math.inf

    def update(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        self.stream.write(("\r" + text + "\x1b[K") if self.tty else (text + "\n"))
        self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")


def replay(reader, sinks: list[Sink], speed: float = 1.0, loop: bool = False, original_timecode: bool = False,
           subject: str | None = None, progress: Progress | None = None) -> dict:
    """Send the take's frames to the sinks at their recorded pace. Returns counts for the summary."""
    total = reader.metadata.get("frames") or None
    sent = passes = 0
    start_mono = time.perf_counter()
    start_wall = time.time()
    pass_offset = 0.0  # replay seconds at which the current pass starts
    while True:
        passes += 1
        t0 = last_t = None
        frame_interval = 0.0
        index = 0
        for frame in reader:
            index += 1
            if t0 is None:
                t0 = last_t = frame.t_capture
            # A take's capture times only go forward; a jump back (clock step) must not stall the replay.
            delta = max(frame.t_capture - last_t, 0.0)
            frame_interval = delta or frame_interval
            last_t = last_t + delta
            due = pass_offset + (last_t - t0) / speed
            wait = due - (time.perf_counter() - start_mono)
            if wait > 0:
                time.sleep(wait)
            now_mono = time.perf_counter()
            if not original_timecode:
                frame.t_capture = start_wall + (now_mono - start_mono)
            frame.t_capture_mono = now_mono
            frame.seq = sent
            if subject:
                frame.subject = subject
            for sink in sinks:
                sink.send(frame)
            sent += 1
            if progress:
                count = f"{index}/{total}" if total and not loop else str(index)
                stats = "  ".join(f"{s.name} {s.sent} sent {s.errors} failed" for s in sinks)
                progress.update(f"replay: pass {passes} frame {count}  {now_mono - start_mono:6.1f} s  {stats}")
        if t0 is None:
            raise FaceBridgeError(f"take {reader.directory} has no readable frames",
                                  "record a new take; this one is empty or damaged")
        if not loop:
            break
        # The next pass starts one frame after this pass's last frame.
        pass_offset += (last_t - t0 + frame_interval) / speed
    return {"frames": sent, "passes": passes, "seconds": round(time.perf_counter() - start_mono, 3),
            "skipped_lines": reader.skipped, "sinks": {s.name: s.stats() for s in sinks}}


def repair_first(take: str, command: str) -> None:
    """`--repair`: rebuild the take's take.json and frames.csv from frames.jsonl, saying what changed."""
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.formats.take import repair_take

    report = repair_take(take)
    cut = f", cut a half-written last line ({report.truncated_bytes} bytes)" if report.truncated_bytes else ""
    print(f"{command}: repaired {take}: {report.frames} frames, rewrote {', '.join(report.rewrote)}{cut}",
          flush=True)


def run(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.formats.take import TakeReader

    if not (args.speed > 0 and math.isfinite(args.speed)):
        raise FaceBridgeError(f"--speed {args.speed} is not a positive number", "use for example --speed 1 or 0.5")
    if args.repair:
        repair_first(args.take, "replay")
    reader = TakeReader(args.take)
    sinks = open_sinks(args)
    progress = Progress()
    targets = ", ".join(f"{s.name} {s.address[0]}:{s.address[1]}" for s in sinks)
    print(f"replaying {args.take} to {targets}" + (" (loop, Ctrl-C stops)" if args.loop else ""), flush=True)
    summary = None
    try:
        summary = replay(reader, sinks, speed=args.speed, loop=args.loop, original_timecode=args.original_timecode,
                         subject=args.subject, progress=progress)
    except KeyboardInterrupt:
        pass
    finally:
        progress.done()
        for s in sinks:
            s.close()
    if summary is None:
        print("replay stopped", flush=True)
        return 130
    stats = ", ".join(f"{name}: {st['sent']} sent, {st['errors']} failed" for name, st in summary["sinks"].items())
    print(f"replayed {summary['frames']} frames ({summary['passes']} pass{'es' if summary['passes'] > 1 else ''}) "
          f"in {summary['seconds']:.2f} s; {stats}"
          + (f"; {reader.summary()}" if reader.summary() else ""), flush=True)
    return 0
