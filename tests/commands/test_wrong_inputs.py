"""A new user's wrong inputs, swept through the real command line (issue 40): every one ends with one line naming
the problem and the fix, a stable exit code (1: a problem to act on, 2: the command line itself), and never a
traceback. Wrong types, missing files, files this user may not read (chmod 000, with root's power to read any
file dropped), folders where a file belongs, busy and invalid ports, repeated options, options that do nothing
without another and outputs that cannot be written.

Each command runs in its own process forked from one that imported the command line once (tests/cli_forks.py),
so the whole sweep costs seconds; Ctrl-C through a real terminal is tests/commands/test_ctrl_c.py.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import ROOT, subprocess_env


class ForkServer:
    def __init__(self, env: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.cli_forks"], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def __call__(self, *argv: str, prog: str = "facebridge", no_dac_override: bool = False,
                 timeout: float = 60) -> dict:
        request = {"argv": list(argv), "prog": prog, "no_dac_override": no_dac_override, "timeout": timeout}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


LOCKED = ("locked_images", "locked.wav", "locked.pem", "locked_model/model.json", "locked_take/frames.jsonl",
          "locked_state")


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """Files and folders the wrong inputs name (chmod 000 ones refuse every reader once root's override is off)."""
    from bridge.frame import FaceFrame
    from bridge.sinks.recorder import TakeRecorder

    d = tmp_path_factory.mktemp("wrong")
    (d / "text.txt").write_text("not a model\n")
    (d / "noise.onnx").write_bytes(np.random.default_rng(1).bytes(300))
    (d / "noise.wav").write_bytes(np.random.default_rng(2).bytes(300))
    (d / "not_pem.pem").write_text("hello\n")
    (d / "adapter.npz").write_bytes(b"PK")  # publish checks its arguments before it reads the file
    (d / "folder").mkdir()
    (d / "empty_images").mkdir()
    (d / "locked_images").mkdir()
    (d / "locked_images" / "a.png").write_bytes(b"")
    (d / "locked.wav").write_bytes(b"RIFF")
    (d / "locked.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (d / "locked_model").mkdir()
    (d / "locked_state").mkdir(mode=0o700)
    (d / "locked_model" / "model.json").write_text("{}")
    (d / "repo" / "metadata").mkdir(parents=True)
    (d / "existing.usda").write_text("#usda 1.0\n")
    for take in ("take", "locked_take"):
        recorder = TakeRecorder(d / take)
        for i in range(3):
            recorder.send(FaceFrame(seq=i, t_capture=1.79e9 + i / 30, t_capture_mono=float(i), subject="Anna",
                                    face_found=True, frame_rate=30.0))
        recorder.close()
    for locked in LOCKED:
        os.chmod(d / locked, 0)
    yield d
    for locked in LOCKED:
        os.chmod(d / locked, 0o700)


@pytest.fixture(scope="module")
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    server = ForkServer(subprocess_env(tmp_path_factory.mktemp("home")))
    yield server
    server.close()


# (prog, argv, exit code, words the one error line holds); {d} is the folder of files above, {busy} a port in use.
# --no-dac marks a case run without root's power to read any file, so chmod 000 refuses.
F, A = "facebridge", "fedagent"
CASES = [
    # the inputs named in issue 40
    (A, "update install --from {d}/repo --trust {d}/keys/trust.json", 2, "trust.json does not exist; it is written by"),
    (A, "serve-repo {d}/repo --port {busy}", 1, "already in use"),
    (A, "serve-repo {d}/repo --port 99999", 2, "99999 is out of range"),
    (F, "run --source {d}/locked_images --no-dac", 1, "permission denied"),
    (F, "replay {d}/locked_take --no-dac", 1, "permission denied"),
    (F, "run --source sample --expression-model {d}/noise.onnx", 1, "is not valid JSON"),
    (F, "bench pipeline --json /proc/nope/x.json", 2, "cannot write"),
    (F, "run --grpc 127.0.0.1:0 --grpc-tls-cert {d}/not_pem.pem --grpc-tls-key {d}/not_pem.pem", 1,
     "is not a PEM"),
    (F, "run --llf a:1,b:2", 1, "holds several addresses"),
    (F, "replay {d}/take/frames.jsonl", 1, "is a take's frames file, not the take"),
    (F, "run --vmc 127.0.0.1:1 --vmc 127.0.0.1:2", 2, "--vmc is given twice"),
    (F, "run --grpc-token secret", 1, "--grpc-token does nothing without --grpc"),
    (F, "run --takes-dir {d}/text.txt", 1, "is a file, not a folder"),
    (F, "engines clear nosuch --cache-dir {d}/engines", 1, "no model named nosuch"),
    (F, "run --faces 99", 1, "--faces 99 is out of range"),
    (F, "export-usd {d}/take {d}/existing.usda", 1, "exists. pass --force"),
    (A, "export-adapter {d}/a.onnx", 2, "does not end in .npz"),
    (F, "run --audio {d}/locked.wav --no-dac", 1, "cannot read audio file"),
    # wrong types and values
    (F, "run --faces x", 2, "invalid int value"),
    (F, "run --max-frames abc", 2, "invalid int value"),
    (F, "run --max-frames 0", 1, "--max-frames must be at least 1"),
    (F, "run --max-frames -3", 1, "--max-frames must be at least 1"),
    (F, "run --camera-fps fast", 2, "invalid float value"),
    (F, "run --source 0 --camera-fps 0", 1, "--camera-fps 0 is out of range"),
    (F, "run --camera-size 0x0", 2, "width and height must be 16 to 8192"),
    (F, "run --camera-size big", 2, "is not WIDTHxHEIGHT"),
    (F, "run --smoothing -1", 1, "--smoothing -1 is out of range"),
    (F, "run --backend nosuch", 2, "invalid choice"),
    (F, "run --faces 0", 1, "--faces 0 is out of range"),
    (F, "replay {d}/take --speed fast", 2, "invalid float value"),
    (F, "replay {d}/take --speed -1", 1, "is not a positive number"),
    (F, "replay {d}/take --speed 0", 1, "is not a positive number"),
    (F, "bench soak --minutes -1", 2, "-1 is not a positive number"),
    (A, "data clear nosuch", 2, "unrecognized arguments: nosuch"),
    (A, "serve-repo {d}/repo --port abc", 2, "'abc' is not a port number"),
    (F, "run --vmc 127.0.0.1:abc", 1, "is not a number"),
    (F, "run --llf 127.0.0.1:70000", 1, "out of range"),
    (F, "run --llf ::1:5", 1, "IPv6 address in brackets"),
    (F, "run --grpc 127.0.0.1:99999", 1, "99999"),
    (F, "export-usd {d}/take {d}/out.txt", 2, "does not end in .usda"),
    # busy ports
    (F, "run --grpc 127.0.0.1:{busy}", 1, "in use"),
    (F, "run --monitor 127.0.0.1:{busy}", 1, "in use"),
    # missing files
    (F, "run --source {d}/nope.mp4", 1, "nope.mp4 does not exist"),
    (F, "calibrate --source {d}/nope.mp4", 1, "nope.mp4 does not exist"),
    (F, "run --source nosuch", 1, "is not a camera, a file or a folder"),
    (F, "run --audio {d}/nope.wav", 1, "does not exist"),
    (F, "run --expression-model {d}/nope", 1, "no expression model manifest"),
    (F, "run --audio sample --adapter {d}/nope.npz --adapter-sha256 0123456789abcdef", 1, "cannot read adapter"),
    (F, "run --grpc 127.0.0.1:0 --grpc-tls-cert {d}/nope.pem --grpc-tls-key {d}/nope.pem", 1, "cannot read it"),
    (F, "replay {d}/nope", 1, "does not exist"),
    (F, "export-usd {d}/nope {d}/x.usda", 1, "does not exist"),
    (F, "run --updates {d}/nope", 33, "update state folder"),
    (A, "publish --keys {d}/nokeys --repo {d}/r2 {d}/nope.npz", 1, "is not a file"),
    (A, "update install --from {d}/repo --trust {d}/folder", 2, "is a folder, where a file is expected"),
    # update state folders (--state): the installer's one check, run by status, rollback and the registry too
    (A, "update status --state {d}/text.txt", 33, "is a file, where a folder is expected"),
    (A, "update status --state {d}/nope", 33, "update state folder"),
    (A, "update status --state {d}/text.txt/sub", 33, "part of this path is a file"),
    (A, "update status --state {d}/locked_state --no-dac", 33, "cannot be read (permission denied)"),
    (A, "update install --from {d}/repo --state {d}/text.txt", 33, "is a file, where a folder is expected"),
    (A, "update install --from {d}/nope --state {d}/locked_state --no-dac", 33, "cannot be read"),
    (A, "update rollback --state {d}/nope", 33, "does not exist"),
    (A, "update rollback --state {d}/text.txt", 33, "is a file, where a folder is expected"),
    (A, "export-adapter {d}/adapter.npz --state {d}/text.txt", 33, "is a file, where a folder is expected"),
    (F, "run --updates {d}/text.txt", 33, "is a file, where a folder is expected"),
    # the publisher's and the device's commands (fedagent keys, publish, server, client, data, simulate, update)
    (A, "keys init --dir {d}/text.txt", 2, "text.txt is a file, where a folder is expected"),
    (A, "keys init --dir {d}/k1 --expires nosuch=3", 1, "--expires 'nosuch=3' is not valid"),
    (A, "keys init --dir {d}/k1 --expires root=-1", 1, "--expires 'root=-1' is not valid"),
    (A, "keys init --dir {d}/k1 --threshold root=3/2", 1, "threshold root=3/2 is not valid"),
    (A, "keys show --dir {d}/folder", 1, "holds no publisher keys"),
    (A, "publish --keys {d}/nokeys --repo {d}/text.txt {d}/adapter.npz", 2, "is a file, where a folder is expected"),
    (A, "publish --keys {d}/nokeys --repo {d}/r3 {d}/text.txt", 1, "is neither an adapter (.npz) nor a model"),
    (A, "publish --keys {d}/nokeys --repo {d}/r3 {d}/adapter.npz {d}/adapter.npz", 1, "lipsync is given twice"),
    (A, "publish --keys {d}/nokeys --repo {d}/r3 {d}/adapter.npz --hardware ,", 1, "names no target"),
    (A, "publish --keys {d}/nokeys --repo {d}/r3 {d}/adapter.npz --reference {d}/nope.npz", 1,
     "--reference {d}/nope.npz is not a file"),
    (A, "server --eval-store {d}/text.txt", 1, "is a file, where a learning-store folder is expected"),
    (A, "server --eval-store {d}/folder --port 99999", 2, "99999 is out of range"),
    (A, "server --eval-store {d}/folder --rounds 0", 1, "--rounds and --min-clients must be at least 1"),
    (A, "server --eval-store {d}/folder --set nosuch=1", 1, "--set nosuch: there is no such setting"),
    (A, "server --eval-store {d}/folder --set rounds=abc", 1, "rounds is a number"),
    (A, "server --eval-store {d}/folder --state {d}/text.txt", 2, "is a file, where a folder is expected"),
    (A, "client --store {d}/text.txt", 1, "learning store {d}/text.txt is a file"),
    (A, "client --store {d}/folder --superlink 127.0.0.1:99999", 1, "port 99999 is out of range"),
    (A, "client --store {d}/folder --connect-timeout -1", 1, "--connect-timeout -1 is not positive"),
    (A, "client --work {d}/text.txt", 2, "is a file, where a folder is expected"),
    (A, "client --store {d}/folder --superlink 127.0.0.1:9 --root-certificates {d}/not_pem.pem", 1,
     "is not a PEM certificate"),
    (A, "client --store {d}/folder --superlink 127.0.0.1:9 --root-certificates {d}/nope.pem", 1, "cannot read it"),
    (A, "client --store {d}/folder --auth-key {d}/folder", 1, "is a folder, not a key file"),
    (A, "server --eval-store {d}/folder --tls-cert {d}/not_pem.pem --tls-key {d}/not_pem.pem --tls-ca "
        "{d}/not_pem.pem", 1, "--tls-cert {d}/not_pem.pem is not a PEM certificate"),
    (A, "server --eval-store {d}/folder --register-key {d}/nope.pub", 1, "--register-key {d}/nope.pub is not a file"),
    (A, "bench --json {d}/b.json --clients 1", 1, "needs at least 2 clients"),
    (A, "bench --json {d}/b.json --rounds 0", 2, "0 is not a positive number"),
    (A, "data --store {d}/text.txt stats", 1, "is a file, where a folder is expected"),
    (A, "data --store {d}/folder export {d}/text.txt", 1, "export destination"),
    (A, "simulate --set nosuch=1", 1, "there is no such setting"),
    (A, "simulate --work {d}/text.txt", 2, "is a file, where a folder is expected"),
    (A, "update install --from {d}/repo --state {d}/s2 --max-bytes 0", 2, "0 is not a positive number"),
    (A, "update install --from {d}/repo --state {d}/s2 --deadline -1", 2, "-1 is not a positive number"),
    (A, "update status --model nosuch", 1, "unknown model 'nosuch'"),
    (A, "update install --from {d}/repo --state {d}/s2 --model lipsync --model lipsync", 1,
     "--model lipsync is given twice"),
    (A, "update rollback --model nosuch", 1, "unknown model 'nosuch'"),
    (A, "bench-update --repeats 0", 2, "0 is not a positive number"),
    (F, "grpc-check 127.0.0.1:99999", 1, "port 99999 is out of range"),
    (F, "serve --grpc 127.0.0.1:99999", 1, "port 99999 is out of range"),
    (F, "run --monitor 127.0.0.1:99999", 1, "port 99999 is out of range"),
    (F, "devices --max-camera-index 0", 1, "--max-camera-index 0 is out of range"),
    (F, "engines build --cache-dir {d}/text.txt", 2, "is a file, where a folder is expected"),
    (F, "engines list --cache-dir {d}/text.txt/x", 2, "is a file, where a folder is expected"),
    (F, "models verify nosuch", 1, "unknown model 'nosuch'"),
    # files this user may not read (chmod 000)
    (F, "run --expression-model {d}/locked_model --no-dac", 1, "cannot be read (permission denied)"),
    (F, "run --grpc 127.0.0.1:0 --grpc-tls-cert {d}/locked.pem --grpc-tls-key {d}/locked.pem --no-dac", 1,
     "Permission denied"),
    (F, "export-usd {d}/locked_take {d}/y.usda --no-dac", 1, "permission denied"),
    # folders where a file belongs, files where a folder belongs
    (F, "run --audio {d}/folder", 1, "is a folder"),
    (F, "run --expression-model {d}/folder", 1, "no expression model manifest"),
    (F, "run --grpc 127.0.0.1:0 --grpc-tls-cert {d}/folder --grpc-tls-key {d}/folder", 1, "Is a directory"),
    (F, "run --record {d}/text.txt", 1, "is a file, not a folder"),
    (F, "bench pipeline --json {d}/folder", 2, "is a folder"),
    (F, "bench pipeline --json {d}/text.txt/x.json", 2, "is a file, where a folder is expected"),
    (A, "simulate --json /proc/nope/x.json", 2, "cannot write"),
    (A, "bench --json {d}/folder", 2, "is a folder"),
    (A, "bench-update --json /proc/nope/x.json", 2, "cannot write"),
    (F, "export-usd {d}/take {d}/folder", 2, "is a folder"),
    (F, "export-usd {d}/text.txt {d}/z.usda", 1, "is a file, not a take folder"),
    (F, "run --source {d}/empty_images", 1, "has no images"),
    (F, "run --source {d}/text.txt", 1, "text.txt"),
    # repeated options
    (F, "run --monitor off --monitor off", 2, "--monitor is given twice"),
    (F, "run --source sample --source sample", 2, "--source is given twice"),
    (F, "run --max-frames 2 --max-frames 3", 2, "--max-frames is given twice"),
    (F, "run --fast --fast", 2, "--fast is given twice"),
    (F, "run --quiet --quiet", 2, "--quiet is given twice"),
    (F, "run --grpc 127.0.0.1:0 --grpc 127.0.0.1:0", 2, "--grpc is given twice"),
    (F, "run --record {d}/t1 --record {d}/t2", 2, "--record is given twice"),
    (F, "run --llf 127.0.0.1:5000 --llf 127.0.0.1:5000", 1, "is given twice"),
    (F, "replay {d}/take --speed 1 --speed 2", 2, "--speed is given twice"),
    (A, "serve-repo {d}/repo --port 1 --port 2", 2, "--port is given twice"),
    (F, "bench pipeline --json {d}/a.json --json {d}/b.json", 2, "--json is given twice"),
    (F, "-v -v run", 2, "-v/--verbose is given twice"),
    # options that do nothing without another, options that conflict
    (F, "run --grpc-tls-cert {d}/not_pem.pem", 1, "--grpc-tls-cert does nothing without --grpc"),
    (F, "run --grpc 127.0.0.1:0 --grpc-tls-cert {d}/not_pem.pem", 1, "does nothing without --grpc-tls-key"),
    (F, "run --monitor-token t", 1, "--monitor-token does nothing without --monitor"),
    (F, "run --remote-token t", 1, "--remote-token does nothing without --remote"),
    (F, "run --remote-tls-ca {d}/not_pem.pem", 1, "--remote-tls-ca does nothing without --remote"),
    (F, "run --learn-keep-audio", 1, "--learn-keep-audio does nothing without --learn"),
    (F, "run --adapter-sha256 0123456789abcdef", 1, "--adapter-sha256 does nothing without --adapter"),
    (F, "run --adapter {d}/nope.npz", 1, "--adapter does nothing without --audio"),
    (F, "run --vmc off --vmc-no-bundle", 1, "--vmc-no-bundle does nothing without --vmc"),
    (F, "run --vmc off --vmc-eye-bones", 1, "--vmc-eye-bones does nothing without --vmc"),
    (F, "run --audio-only", 1, "--audio-only does nothing without --audio"),
    (F, "run --learn", 1, "--learn pairs speech"),
    (F, "run --faces 2 --audio sample --audio-only", 1, "--audio-only has no face to count"),
    (F, "run --remote 127.0.0.1:1 --audio sample --audio-only", 1, "--audio-only has no frames to send"),
    (F, "run --camera-size 1280x720", 1, "apply to a camera"),
    (F, "run --subject ''", 1, "empty subject name"),
]


def _cases():
    for prog, line, code, words in CASES:
        no_dac = line.endswith(" --no-dac")
        line = line.removesuffix(" --no-dac")
        yield pytest.param(prog, line, code, words, no_dac, id=f"{prog} {line}")


@pytest.mark.parametrize("prog, line, code, words, no_dac", list(_cases()))
def test_a_wrong_input_ends_in_one_line_with_its_cause_and_a_stable_exit_code(cli, place, busy_port, prog, line,
                                                                              code, words, no_dac):
    import shlex

    argv = shlex.split(line.format(d=place, busy=busy_port))
    if prog == F and argv[0] == "run":  # a short run on the sample, every other default as a user gets it
        argv += _defaults({a for a in argv if a.startswith("--")})
    result = cli(*argv, prog=prog, no_dac_override=no_dac)
    err = result["stderr"]
    assert "Traceback" not in err and "Traceback" not in result["stdout"], err
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    assert result["rc"] == code and len(errors) == 1, (result["rc"], err[-1500:])
    assert words.format(d=place) in errors[0], errors[0]


def _defaults(given: set[str]) -> list[str]:
    """The sample, no monitor and one frame, unless the case gives those options itself."""
    pairs = [("--source", "sample"), ("--monitor", "off"), ("--max-frames", "1"), ("--updates", "off")]
    return [x for option, value in pairs if option not in given for x in (option, value)]


def test_the_sweep_covers_the_named_inputs_and_forty_more():
    assert len(CASES) >= 18 + 40
