"""`facebridge devices`: cameras, audio inputs and inference backends on this machine."""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("devices", help="list cameras, microphones and inference backends",
                       description="List the cameras, audio inputs and inference backends FaceBridge can use here.")
    p.add_argument("--max-camera-index", type=int, default=8, metavar="N", help="probe camera indices 0..N-1")
    p.set_defaults(func=run)


def run(args) -> int:
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.errors import FaceBridgeError
    from bridge.sources.camera import list_cameras

    if not 1 <= args.max_camera_index <= 64:
        raise FaceBridgeError(f"--max-camera-index {args.max_camera_index} is out of range", "give 1 to 64")
    cameras = list_cameras(args.max_camera_index)
    print("Cameras:")
    if not cameras:
        print("  none found (use `--source sample`, a video file or a folder of images)")
    for c in cameras:
        print(f"  camera:{c['index']}  {c['width']}x{c['height']}" + (f" @ {c['fps']:.0f} fps" if c["fps"] else ""))
    print("Audio inputs:")
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.audio.sources import list_input_devices

    inputs, reason = list_input_devices(with_reason=True)
    if not inputs:
        # PortAudio itself is only asked for when it is what is missing (it answered when it found no device)
        need = "" if reason and reason.startswith("PortAudio found") else "; microphones need PortAudio: " \
            "apt-get install libportaudio2"
        print(f"  none found: {reason} (plug in a microphone, or use `--audio FILE.wav`{need})")
    for d in inputs:
        default = "  (default)" if d.get("default") else ""
        print(f"  mic:{d['index']}  {d['name']}  {d['channels']} ch  {d['samplerate']:.0f} Hz{default}")
    print("Inference backends (automatic order; `--backend auto` takes the first usable one):")
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.engines.select import explain

    for a in explain("auto"):
        print(f"  {'yes' if a.ok else 'no ':3} {a.backend:17} {a.reason}")
    # loaded when the command runs: `facebridge --help` stays light (bridge/cli.py)
    from bridge.engines.precision import cpu_has_native_bf16

    native = ("this CPU computes bf16 natively (AMX / AVX512-BF16): --cpu-precision bf16 runs OpenVINO in bf16, "
              "faster and less exact" if cpu_has_native_bf16() else "this CPU has no native bf16: f32 only")
    print(f"CPU inference precision: f32 by default; {native}")
    return 0
