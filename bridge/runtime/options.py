"""Run options: what `facebridge run` was asked to do (RunConfig, OutputConfig), and the checks made before
anything opens: output addresses turned off, several Live Link Face targets, a subject name Unreal can show, the
update store to follow, a local lip-sync adapter and its hash. Each refusal is one line naming the option and the
fix.

`check_run_config` is the one place where options that conflict, depend on an option not given, or cannot work
together are refused, before any input, output or model opens; `run_warnings` names what runs but is probably
not meant (every output off). Options added to `facebridge run` add their checks here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bridge import ports
from bridge.audio.lipsync import load_adapter
from bridge.errors import FaceBridgeError, SinkError
from bridge.formats.livelinkface import check_subject as llf_check
from bridge.mapping import MAX_HEAD_DEAD_ZONE
from bridge.models import sha256_file
from bridge.pipeline import PipelineOptions
from bridge.updates.store import StateDir, default_state_dir

DEFAULT_MONITOR = ports.MONITOR  # the monitor page, /metrics, /healthz, /readyz (docs/MONITOR.md)

OFF = ("off", "none", "no", "")
MAX_FACES = 8  # --faces: each face is its own subject, VMC target and describe step; more is a typo, not a stage


def address_or_off(text: str | None) -> str | None:
    """An output address as given, or None when the user turned it off ('off', 'none', 'no')."""
    return None if text is None or text.strip().lower() in OFF else text


def llf_targets(texts: list[str] | tuple[str, ...] | str | None, default: str) -> tuple[str, ...]:
    """Live Link Face targets from one or more --llf options: () when turned off, the default when none given.
    A target named twice, or 'off' beside an address, is refused (one editor would get every frame twice)."""
    if texts is None:
        return (default,)
    texts = [texts] if isinstance(texts, str) else list(texts)
    addresses = [t.strip() for t in texts if address_or_off(t) is not None]
    if addresses and len(addresses) < len(texts):
        raise FaceBridgeError("--llf off was given together with an address", "give either --llf off or addresses")
    seen = set()
    for address in addresses:
        if address in seen:
            raise FaceBridgeError(f"--llf {address} is given twice", "name each Live Link Face target once")
        seen.add(address)
    return tuple(addresses)


def check_subject(subject: str) -> str:
    """The --subject name, or a one-line error when Unreal could not show it (empty, over 64 UTF-8 bytes,
    control characters): refused at start rather than failing every packet."""
    try:
        llf_check(subject)
    except SinkError as e:
        raise FaceBridgeError(f"--subject {subject!r}: {e.problem.removeprefix('Live Link Face: ')}", e.fix) from None
    return subject


def update_state_dir(spec: str | None) -> Path | None:
    """The update store a run follows: None when off; "auto" is this user's store even before anything is installed
    there (the watch notices the first install, so a bridge started before its first release takes it live)."""
    if spec is None:
        return None
    if spec == "auto":
        return default_state_dir()
    path = Path(spec)
    StateDir(path).check(must_exist=True)  # the installer's own check of its folder
    return path


def checked_adapter(path: str, sha256: str | None) -> dict:
    """A local lip-sync adapter trial: its file hash must match what the user gave, its tensors must fit."""
    if not sha256 or len(sha256) < 12:
        raise FaceBridgeError("--adapter needs --adapter-sha256 (at least 12 hex digits of the file's sha256)",
                              f"run `sha256sum {path}` and pass what it prints")
    try:
        digest = sha256_file(Path(path))
    except OSError as e:
        raise FaceBridgeError(f"cannot read adapter {path} ({e.strerror})",
                              "check the path given to --adapter") from None
    if not digest.startswith(sha256.lower()):
        raise FaceBridgeError(f"adapter {path} has sha256 {digest[:16]}…, not {sha256[:16]}…",
                              "the file changed since its hash was taken; use the file you meant")
    return load_adapter(path)


@dataclass(frozen=True)
class OutputConfig:
    """Where frames go. An address of None means that output is off."""

    llf: tuple[str, ...] = (ports.LIVE_LINK_FACE,)  # Live Link Face (Unreal) UDP targets; () = off
    llf_subject: str | None = None  # send under this subject instead of the frame's (replay --subject)
    vmc: str | None = ports.VMC  # VMC/OSC receiver
    vmc_bundle: bool = True
    vmc_expressions: tuple[str, ...] = ("arkit",)
    vmc_eye_bones: bool = False
    record: str | None = None  # take directory
    ifm: str | None = None  # iFacialMocap receiver HOST[:PORT] (VMagicMirror, VRCFaceTracking, VNyan, Warudo, ...)
    grpc: str | None = None  # HOST:PORT of the gRPC server
    grpc_token: str | None = None
    grpc_tls_cert: str | None = None
    grpc_tls_key: str | None = None
    subjects: tuple[str, ...] = ()  # with several faces (--faces N): one VMC target each (runtime/faces.py)


@dataclass(frozen=True)
class RunConfig:
    """Everything `facebridge run` was asked to do (built by bridge/commands/run.py from its arguments)."""

    source: str | None = None  # --source spec; None: camera 0 if there is one, else the sample
    fast: bool = False  # read file sources as fast as possible (every frame kept) instead of at their rate
    camera_size: tuple[int, int] | None = None  # (width, height) pixels asked of a camera
    camera_fps: float | None = None  # frames per second asked of a camera
    mirror: bool = False  # process a mirror image: the avatar moves like the subject's reflection
    max_frames: int | None = None  # frames sent (dropped frames do not count)
    subject: str = "FaceBridge"  # with faces > 1: comma-separated names, one per face (bridge/multiface.py)
    faces: int = 1  # --faces N: track up to N faces, each its own subject
    pipeline: PipelineOptions = field(default_factory=PipelineOptions)
    stages: str = "auto"  # inference threads: "auto", "1" or "2"
    audio: str | None = None  # mic | mic:N | sample | FILE
    audio_only: bool = False
    learn: str | None = None  # --learn: store learning windows in this folder ("" = the default store); None: off
    learn_audio: bool = False  # --learn-keep-audio: also keep the raw 16 kHz audio of each window
    calibration: bool = True  # apply the subject's stored calibration profile
    status_line: bool = True
    outputs: OutputConfig = field(default_factory=OutputConfig)
    updates: str | None = "auto"  # update store to follow live: a directory, "auto" (the per-user one when it
    # exists) or None (off)
    adapter: str | None = None  # a lip-sync adapter (.npz) to try locally instead of the installed one
    adapter_sha256: str | None = None  # its sha256 (or a prefix of at least 12 hex digits), checked before use
    monitor: str | None = DEFAULT_MONITOR  # HOST:PORT of the monitor page and metrics; None: off
    monitor_token: str | None = None  # needed to serve the monitor beyond 127.0.0.1 ("auto": a random one)
    monitor_tls_cert: str | None = None  # PEM: the monitor serves https
    monitor_tls_key: str | None = None
    takes_dir: str = "takes"  # where takes started from the monitor page go (one new directory each)
    remote: str | None = None  # HOST:PORT of a `facebridge serve` that tracks instead of this machine
    remote_token: str | None = None
    remote_tls_ca: str | None = None  # the server's CA certificate (PEM) for TLS
    mapping: str | None = None  # --mapping FILE.json: the blendshape mapping (bridge/mapping.py) instead of the
    # one stored in the subject's profile
    head_dead_zone: float | None = None  # degrees; None: the mapping's own (0 without one)
    osc_remote: str | None = None  # [HOST:]PORT of the OSC remote control listener (runtime/osc_remote.py); None: off
    osc_allow: tuple[str, ...] = ()  # controller addresses allowed beyond loopback
    timecode_source: str = "system"  # system | ntp | ltc (runtime/timecode_clock.py)
    timecode_rate: str | None = None  # --timecode-rate as given (bridge/timecode.py RATES); None: the source's rate
    ltc_input: str | None = None  # the audio input LTC comes in on (mic, mic:N, FILE); None: mic
    ntp_server: str | None = None  # HOST[:PORT]; None: pool.ntp.org


# (option given, option it needs, what the needed option is given as): each refused when given alone
_NEEDS = (
    ("--grpc-token", "--grpc", "--grpc HOST:PORT", lambda c: c.outputs.grpc_token, lambda c: c.outputs.grpc),
    ("--grpc-tls-cert", "--grpc", "--grpc HOST:PORT", lambda c: c.outputs.grpc_tls_cert, lambda c: c.outputs.grpc),
    ("--grpc-tls-key", "--grpc", "--grpc HOST:PORT", lambda c: c.outputs.grpc_tls_key, lambda c: c.outputs.grpc),
    ("--grpc-tls-cert", "--grpc-tls-key", "--grpc-tls-key PEM", lambda c: c.outputs.grpc_tls_cert,
     lambda c: c.outputs.grpc_tls_key),
    ("--grpc-tls-key", "--grpc-tls-cert", "--grpc-tls-cert PEM", lambda c: c.outputs.grpc_tls_key,
     lambda c: c.outputs.grpc_tls_cert),
    ("--monitor-token", "--monitor", "--monitor HOST:PORT (not off)", lambda c: c.monitor_token, lambda c: c.monitor),
    ("--remote-token", "--remote", "--remote HOST:PORT", lambda c: c.remote_token, lambda c: c.remote),
    ("--remote-tls-ca", "--remote", "--remote HOST:PORT", lambda c: c.remote_tls_ca, lambda c: c.remote),
    ("--learn-keep-audio", "--learn", "--learn", lambda c: c.learn_audio, lambda c: c.learn is not None),
    ("--adapter-sha256", "--adapter", "--adapter FILE.npz", lambda c: c.adapter_sha256, lambda c: c.adapter),
    ("--adapter", "--audio", "--audio mic|sample|FILE", lambda c: c.adapter, lambda c: c.audio),
    ("--vmc-no-bundle", "--vmc", "--vmc HOST:PORT (not off)", lambda c: not c.outputs.vmc_bundle,
     lambda c: c.outputs.vmc),
    ("--vmc-eye-bones", "--vmc", "--vmc HOST:PORT (not off)", lambda c: c.outputs.vmc_eye_bones,
     lambda c: c.outputs.vmc),
    ("--audio-only", "--audio", "--audio mic or --audio FILE.wav", lambda c: c.audio_only, lambda c: c.audio),
    ("--osc-allow", "--osc-remote", "--osc-remote HOST:PORT", lambda c: c.osc_allow, lambda c: c.osc_remote),
    ("--ltc-input", "--timecode-source ltc", "--timecode-source ltc", lambda c: c.ltc_input,
     lambda c: c.timecode_source == "ltc"),
    ("--ntp-server", "--timecode-source ntp", "--timecode-source ntp", lambda c: c.ntp_server,
     lambda c: c.timecode_source == "ntp"),
)


def check_run_config(config: RunConfig) -> None:
    """Refuse, in one line naming the option and the fix, what cannot work or would be silently ignored: an
    option whose partner is missing, options that conflict, numbers out of range, a takes folder that is a file.
    Runs before anything opens (bridge/runtime/session.py)."""
    for given, needed, how, is_given, has_needed in _NEEDS:
        if is_given(config) and not has_needed(config):
            raise FaceBridgeError(f"{given} does nothing without {needed}", f"add {how}, or drop {given}")
    if config.max_frames is not None and config.max_frames < 1:
        raise FaceBridgeError("--max-frames must be at least 1", "pass a positive number of frames")
    if not 1 <= config.faces <= MAX_FACES:
        raise FaceBridgeError(f"--faces {config.faces} is out of range", f"give 1 to {MAX_FACES}")
    if config.learn is not None and (not config.audio or config.audio_only):
        raise FaceBridgeError("--learn pairs speech with the camera's mouth and needs both",
                              "add --audio mic (and a camera source, without --audio-only)")
    if config.faces > 1 and config.audio_only:
        raise FaceBridgeError("--faces needs a camera or video: --audio-only has no face to count",
                              "drop --faces, or drop --audio-only")
    if config.remote and config.audio_only:
        raise FaceBridgeError("--remote tracks a camera on the server: --audio-only has no frames to send",
                              "drop --remote, or drop --audio-only")
    if config.camera_size is not None and min(config.camera_size) < 1:
        raise FaceBridgeError(f"--camera-size {config.camera_size[0]}x{config.camera_size[1]} is not a size",
                              "give WIDTHxHEIGHT in pixels, e.g. 1280x720")
    if config.camera_fps is not None and not 1 <= config.camera_fps <= 1000:
        raise FaceBridgeError(f"--camera-fps {config.camera_fps:g} is out of range", "give 1 to 1000, e.g. 30")
    if config.head_dead_zone is not None:
        if not 0.0 <= config.head_dead_zone <= MAX_HEAD_DEAD_ZONE:
            raise FaceBridgeError(f"--head-dead-zone {config.head_dead_zone:g} is out of range",
                                  f"give 0 (off) to {MAX_HEAD_DEAD_ZONE:g} degrees")
    update_state_dir(config.updates)  # a given store must exist (checked again when the run follows it)
    takes = Path(config.takes_dir)
    if takes.exists() and not takes.is_dir():
        raise FaceBridgeError(f"--takes-dir {takes} is a file, not a folder",
                              "give a folder for the takes the monitor page's Record button starts")
    record = config.outputs.record
    if record and Path(record).exists() and not Path(record).is_dir():
        raise FaceBridgeError(f"--record {record} is a file, not a folder", "give a new folder for the take")


def run_warnings(config: RunConfig) -> list[str]:
    """What runs but is probably not meant, said at start in one line each."""
    outputs = config.outputs
    if not (outputs.llf or outputs.vmc or outputs.grpc or outputs.record or outputs.ifm):
        where = "only the monitor page shows them" if config.monitor else "nothing shows them"
        return [f"every output is off (--llf off, --vmc off, no --grpc, --ifm or --record): frames are tracked and "
                f"{where}"]
    return []
