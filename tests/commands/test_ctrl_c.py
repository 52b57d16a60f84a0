"""One Ctrl-C policy for every command, typed on a real terminal (a pty) at set moments: the command stops, keeps
what is done, says so in one line and exits 130, with no traceback (issue 40). The seconds from Ctrl-C to the
exit are bounded loosely (a loaded 2-core machine); the policy is "within a second" on an idle one."""
from __future__ import annotations

import json
import re
import signal
import socket
import sys

import pytest

from tests.helpers import facebridge_cmd, pty_run, subprocess_env

STOP_BOUND_S = 15.0  # loose: CI machines are shared; a command that ignores Ctrl-C runs to the test's timeout


# a command quick enough to finish before Ctrl-C lands: done (0), stopped (130), or done and then ended by the
# SIGINT itself while Python shut down (its handlers are gone by then; a shell shows that as 130 too)
FINISHED_OR_STOPPED = (0, 130, -signal.SIGINT)


def fedagent_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fedagent.cli", *args]


# a command that said "stopped (Ctrl-C)" and exited 130 can still end by SIGINT: Python itself kills the process
# with it on the way out (seen in 2 of 40 `devices` runs, Ctrl-C during the backend probe: the command's handler ran
# once, atexit found nothing pending). A shell shows 130 for both.
CTRL_C_STATUS = (130, -signal.SIGINT)


def _stopped(rc, out, after) -> None:
    assert rc in CTRL_C_STATUS and "Traceback" not in out, (rc, out[-2000:])
    assert after is not None and after < STOP_BOUND_S, (after, out[-500:])
    assert "stopped (Ctrl-C)" in out, out[-500:]


@pytest.fixture(scope="module")
def take(tmp_path_factory):
    from bridge.frame import FaceFrame
    from bridge.sinks.recorder import TakeRecorder

    path = tmp_path_factory.mktemp("ctrlc") / "take"
    recorder = TakeRecorder(path)
    for i in range(3000):  # long enough that export-usd is still writing when its first progress line shows
        recorder.send(FaceFrame(seq=i, t_capture=1.79e9 + i / 30, t_capture_mono=float(i), subject="Anna",
                                face_found=True, frame_rate=30.0))
    recorder.close()
    return path


RUN = ("run", "--source", "sample", "--monitor", "off", "--vmc", "off", "--updates", "off")


@pytest.mark.parametrize("moment, when", [
    ("while its models load (-v says so)", "bridge.engines"),
    ("once frames flow", " fps | "),  # its first status line (status lines come every 5 s)
])
def test_run_stops_on_ctrl_c_and_exits_130(moment, when, tmp_path):
    verbose = ["-v"] if "-v" in moment else []
    rc, out, took = pty_run(facebridge_cmd(*verbose, *RUN, "--llf", "off", "--record", str(tmp_path / "take")),
                            subprocess_env(tmp_path / "home"), ctrl_c_when=when)
    _stopped(rc, out, took)
    if not verbose:  # what was done is kept: the take is closed whole, with the frames sent
        meta = json.loads((tmp_path / "take" / "take.json").read_text())
        sent = re.search(r"(\d+) frames sent", out)
        assert sent and meta["complete"] is True and meta["frames"] == int(sent.group(1)) >= 1, (meta, out[-500:])


def test_replay_stops_on_ctrl_c(take, tmp_path):
    rc, out, took = pty_run(facebridge_cmd("replay", str(take), "--loop", "--vmc", "off"),
                            subprocess_env(tmp_path / "home"), ctrl_c_when="replaying")
    assert rc in CTRL_C_STATUS and "Traceback" not in out, (rc, out[-1500:])
    assert took is not None and took < STOP_BOUND_S, (took, out[-500:])


def test_export_usd_stopped_while_it_writes_leaves_no_file(take, tmp_path):
    out_file = tmp_path / "take.usda"
    rc, out, took = pty_run(facebridge_cmd("export-usd", str(take), str(out_file)), subprocess_env(tmp_path / "h"),
                            ctrl_c_when="export-usd: 1/")
    if rc == 0:  # it finished before the Ctrl-C landed (a fast machine): then the file is whole
        assert out_file.exists() and "wrote" in out
        return
    _stopped(rc, out, took)
    assert not out_file.exists() and not list(tmp_path.glob("*.tmp*")), list(tmp_path.iterdir())


def test_engines_build_stops_on_ctrl_c_instead_of_counting_a_failure(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX builds engines ahead of time without a GPU")
    rc, out, took = pty_run(facebridge_cmd("engines", "build", "--cache-dir", str(tmp_path / "engines")),
                            subprocess_env(tmp_path / "home"), ctrl_c_when="steps)")
    _stopped(rc, out, took)
    assert "FAILED" not in out and "models ready" not in out, out[-1500:]


def test_bench_soak_keeps_its_samples_as_a_partial_result(tmp_path):
    result = tmp_path / "soak.json"
    rc, out, took = pty_run(facebridge_cmd("bench", "soak", "--minutes", "2", "--interval", "0.5", "--json",
                                           str(result)), subprocess_env(tmp_path / "home"), ctrl_c_when="connections")
    _stopped(rc, out, took)
    doc = json.loads(result.read_text())
    assert doc["partial"] is True and doc["results"]["ended_by"] == "Ctrl-C" and doc["results"]["samples"]
    assert not (tmp_path / "soak.json.partial").exists()


def test_fedagent_serve_repo_stops_on_ctrl_c(tmp_path):
    (tmp_path / "repo" / "metadata").mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, took = pty_run(fedagent_cmd("serve-repo", str(tmp_path / "repo"), "--port", str(port)),
                            subprocess_env(tmp_path / "home"), ctrl_c_when="Ctrl-C stops")
    _stopped(rc, out, took)


@pytest.mark.parametrize("command, when", [
    (("-v", "calibrate", "--source", "sample"), "bridge.engines"),  # while its models load
    (("serve", "--grpc", "127.0.0.1:0", "--quiet"), "listening on"),
])
def test_calibrate_and_serve_stop_on_ctrl_c(command, when, tmp_path):
    rc, out, took = pty_run(facebridge_cmd(*command), subprocess_env(tmp_path / "home"), ctrl_c_when=when,
                            timeout=240)
    _stopped(rc, out, took)
    assert not list((tmp_path / "home").rglob("*.json.tmp*"))  # nothing half-written


def test_serve_with_front_ends_stopped_by_two_ctrl_c_leaves_no_ring_in_dev_shm(tmp_path):
    """`serve --front-ends 4`: Ctrl-C twice, as an impatient user types it. The second one, typed while the first
    one's stop was under way, once cut the engine's stop short and left every front end's shared-memory ring in
    /dev/shm (a container's has 64 MiB). The stop ends as one Ctrl-C's, and no ring of this server is left."""
    import os
    import time

    from tests.helpers import Terminal

    def rings() -> set[str]:
        return {name for name in os.listdir("/dev/shm") if name.startswith("psm_")}

    before = rings()
    term = Terminal(facebridge_cmd("serve", "--grpc", "127.0.0.1:0", "--front-ends", "4", "--max-streams", "8",
                                   "--runners", "cpu", "--updates", "off"), subprocess_env(tmp_path / "home"))
    try:
        assert term.until("listening on", 240), term.text[-2000:]
        term.ctrl_c()
        time.sleep(0.3)
        os.write(term.master, b"\x03")  # not ctrl_c(): the stop is timed from the first one (typed_at)
    finally:
        rc, out, took = term.wait(120)
    _stopped(rc, out, took)
    assert out.count("stopped (Ctrl-C)") == 1, out[-1000:]
    assert not rings() - before


def test_fedagent_simulate_stops_on_ctrl_c_and_leaves_no_flower_process(tmp_path):
    import subprocess

    rc, out, took = pty_run(fedagent_cmd("simulate", "--clients", "2", "--rounds", "1", "--work", str(tmp_path / "w")),
                            subprocess_env(tmp_path / "home"), ctrl_c_when="work folder", timeout=240)
    _stopped(rc, out, took)
    left = subprocess.run(["pgrep", "-f", str(tmp_path / "w")], capture_output=True, text=True).stdout.split()
    assert not left, left


def test_devices_stops_while_it_probes_the_inference_backends(tmp_path):
    rc, out, took = pty_run(facebridge_cmd("devices"), subprocess_env(tmp_path / "home"),
                            ctrl_c_when="Inference backends")
    if rc == 0:  # every backend answered before the Ctrl-C landed: then the list is whole
        assert "CPU inference precision" in out, out[-1500:]
        return
    _stopped(rc, out, took)
    assert "Audio inputs:" in out  # what was printed stays


def test_models_verify_stops_on_ctrl_c_instead_of_counting_a_failure(tmp_path):
    rc, out, took = pty_run(facebridge_cmd("models", "verify"), subprocess_env(tmp_path / "home"),
                            ctrl_c_when="ok   ")
    _stopped(rc, out, took)
    assert "FAIL" not in out and "failed verification" not in out and "models verified" not in out, out[-1500:]


def test_fedagent_keys_init_stopped_while_it_writes_leaves_whole_keys_or_none(tmp_path):
    keys = tmp_path / "keys"
    rc, out, took = pty_run(fedagent_cmd("-v", "keys", "init", "--dir", str(keys)), subprocess_env(tmp_path / "home"),
                            ctrl_c_when="writing new keys")
    assert rc in FINISHED_OR_STOPPED and "Traceback" not in out, (rc, out[-1500:])
    if rc == 130:
        _stopped(rc, out, took)
    assert not list(keys.rglob(".*.tmp-*")), list(keys.rglob("*"))
    if (keys / "keys.json").exists():  # begun: then whole (a keys folder `keys show` reads, trust.json written)
        from fedagent.publisher.keys import KeyRing

        described = KeyRing(keys).describe()
        assert described["root_version"] == 1 and (keys / "trust.json").exists()
        assert all(k["held_here"] for role in described["roles"].values() for k in role["keys"])


@pytest.fixture
def published(tmp_path):
    """A publisher (keys + a repository holding release 1 of the lip-sync adapter) and a loopback HTTP server."""
    from tests.updates.kit import HostileServer, Publisher

    publisher = Publisher(tmp_path / "publisher")
    assert publisher.publish() == 1
    with HostileServer(publisher.repo) as server:
        yield publisher, server


def test_fedagent_publish_stopped_while_it_signs_leaves_the_repository_consistent(published, tmp_path):
    publisher, server = published
    rc, out, took = pty_run(fedagent_cmd("-v", "publish", "--keys", str(publisher.keys), "--repo",
                                         str(publisher.repo), str(publisher.adapter())),
                            subprocess_env(tmp_path / "home"), ctrl_c_when="signing")
    assert rc in FINISHED_OR_STOPPED and "Traceback" not in out, (rc, out[-1500:])
    if rc == 130:
        _stopped(rc, out, took)
    # a device reads the repository as the old release or the new one, never a mix of the two
    from tests.updates.kit import Device

    device = Device(tmp_path / "state", publisher.trust)
    assert device.install(server.url)[0].status == "installed"
    device.assert_intact(device.release)
    assert device.release in (1, 2)
    assert not list(publisher.repo.rglob(".*.tmp-*")) and not list(publisher.keys.rglob(".*.tmp-*"))


def test_fedagent_update_install_stopped_while_it_downloads_keeps_the_installed_release(published, tmp_path):
    from tests.updates.kit import Device

    publisher, server = published
    home = tmp_path / "home"
    device = Device(tmp_path / "state", publisher.trust)
    device.install(server.url)
    device.assert_intact(1)
    publisher.publish()  # release 2, served one byte at a time
    path = publisher.url_of()
    server.serve_drip(path, (publisher.repo / path[1:]).read_bytes(), every_s=0.05)
    rc, out, took = pty_run(fedagent_cmd("update", "install", "--from", server.url, "--state", str(device.state)),
                            subprocess_env(home), ctrl_c_when="download lipsync")
    _stopped(rc, out, took)
    device.assert_intact(1)  # release 1 serves, no staging, buffer or slot left behind


@pytest.fixture
def store(tmp_path):
    from bridge.audio.learn_store import LearnStore
    from tests.helpers import learn_window

    learn = LearnStore(tmp_path / "learn")
    for seed in range(3):
        learn.add(learn_window(seed=seed))
    return learn


def test_fedagent_data_clear_stopped_at_its_question_deletes_nothing(store, tmp_path):
    import time

    from tests.helpers import Terminal

    term = Terminal(fedagent_cmd("data", "--store", str(store.root), "clear"), subprocess_env(tmp_path / "home"))
    assert term.until("[y/N]", 60), term.text
    time.sleep(0.5)  # as a person would: a signal that lands between the prompt and the read waits for a key
    term.ctrl_c()
    _stopped(*term.wait(60))
    assert len(store.paths()) == 3


def test_fedagent_server_and_client_stop_on_ctrl_c_while_they_wait_and_leave_no_flower_process(store, tmp_path):
    """The server waits for a second device; one device has joined and waits for rounds: Ctrl-C on each."""
    import subprocess

    from fedagent.local.processes import free_port
    from tests.helpers import Terminal

    port = free_port()
    server = Terminal(fedagent_cmd("server", "--eval-store", str(store.root), "--port", str(port), "--control-port",
                                   str(free_port()), "--state", str(tmp_path / "server"), "--min-clients", "2",
                                   "--wait-devices", "300"), subprocess_env(tmp_path / "server-home"))
    try:
        assert server.until("device(s)", 180), server.text[-2000:]
        rc, out, took = pty_run(fedagent_cmd("client", "--superlink", f"127.0.0.1:{port}", "--store",
                                             str(store.root), "--work", str(tmp_path / "client")),
                                subprocess_env(tmp_path / "device-home"), ctrl_c_when="connected to", timeout=240)
        _stopped(rc, out, took)
        server.ctrl_c()
        rc, out, took = server.wait(120)
        _stopped(rc, out, took)
    finally:
        server.close()
    for folder in ("client", "server"):
        left = subprocess.run(["pgrep", "-f", str(tmp_path / folder)], capture_output=True, text=True).stdout.split()
        assert not left, (folder, left)


@pytest.mark.parametrize("prog, command", [("bridge.cli", ("models", "list")), ("fedagent.cli", ("data", "stats"))])
def test_a_ctrl_c_while_the_command_line_still_loads_ends_in_one_line(prog, command, tmp_path):
    """Ctrl-C typed while the command line's own modules load (-X importtime shows when bridge.console has
    loaded; more follow before the command runs) is answered once it runs: one line, 130, no traceback."""
    rc, out, took = pty_run([sys.executable, "-X", "importtime", "-m", prog, *command],
                            subprocess_env(tmp_path / "home"), ctrl_c_when="| bridge.console")
    if rc == 0:  # it ran to its end before the Ctrl-C landed (a fast machine)
        return
    _stopped(rc, out, took)
