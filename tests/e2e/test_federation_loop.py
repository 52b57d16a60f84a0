"""The whole federated loop with real processes, and what a device can reach on the federation server (marker
`flower`; one federation run, about two minutes, shared by every test here).

device0 fills its learning store with `facebridge run --source sample --audio sample --learn` (devices 1 and 2 start
from copies of it: the same clip would give them much the same windows, at 12-15 s a run); `fedagent server` (TLS,
registered device keys, signing keys and a release repository) and three `fedagent client` run two SecAgg+ rounds;
the server publishes a signed release. A fourth `facebridge run` on device0, started before any
release existed and with every update setting at its default, is running when device0 installs that release.

Where this runs as root with `ip`, the server lives in a network namespace of its own and the devices in another,
joined by a veth pair (10.x addresses inside those two namespaces only; both are deleted afterwards): devices reach
the server only from a non-loopback address, as they would from another machine, and so does an attacker that
tries the Control API (list, stop, start a run, which pushes a FAB, and register a key) on the device port.
Elsewhere the same loop runs on 127.0.0.1 and the tests that need another address are skipped, saying why.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fedagent.app.project import run_config_file, write_project
from fedagent.local.flower_cli import FlowerCli
from fedagent.local.processes import BIN, Tls, flower_env, free_port
from tests.helpers import device_key, facebridge_cmd, fedagent_cmd, subprocess_env, tls_files

pytestmark = [pytest.mark.flower, pytest.mark.timeout(900)]

DEVICES = 3
SETTINGS = {"max-epochs": 2, "patience": 1, "timeout-setup": 60, "timeout-share-keys": 60, "timeout-train": 90,
            "timeout-unmask": 60, "wait": 180}


class Namespaces:
    """Two network namespaces, `server` and `devices`, joined by a veth pair with 10.x addresses; deleted on exit."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 10000}{random.randrange(100)}"
        self.server, self.devices = f"fb-srv-{tag}", f"fb-dev-{tag}"
        net = f"10.{random.randrange(200, 250)}.{random.randrange(1, 250)}"
        self.server_ip, self.device_ip = f"{net}.1", f"{net}.2"
        self._veth = (f"fbs{tag}", f"fbd{tag}")

    @staticmethod
    def unavailable() -> str | None:
        if os.geteuid() != 0:
            return "network namespaces need root (ip netns add)"
        if shutil.which("ip") is None:
            return "the `ip` command (iproute2) is not installed"
        return None

    def __enter__(self) -> Namespaces:
        try:
            for ns in (self.server, self.devices):
                self._ip("netns", "add", ns)
            a, b = self._veth
            self._ip("link", "add", a, "type", "veth", "peer", "name", b)
            for end, ns, ip in ((a, self.server, self.server_ip), (b, self.devices, self.device_ip)):
                self._ip("link", "set", end, "netns", ns)
                self._ip("-n", ns, "addr", "add", f"{ip}/24", "dev", end)
                self._ip("-n", ns, "link", "set", end, "up")
                self._ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for ns in (self.server, self.devices):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:  # only processes this test started can live in its own namespaces
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    def exec_in(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]


class Lines(threading.Thread):
    """Collects a process's output lines as they come."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream, self.lines = stream, []
        self.start()

    def run(self) -> None:
        for line in self.stream:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float, proc: subprocess.Popen) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((line for line in self.lines if re.search(pattern, line)), None)
            if found:
                return found
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"no line matching {pattern!r}:\n{''.join(self.lines)[-3000:]}")


@dataclass
class Loop:
    network: Namespaces | None
    no_network: str | None  # why the loop ran on 127.0.0.1
    server_out: str = ""
    server_rc: int | None = None
    clients_connected: list[str] = field(default_factory=list)
    attacks: dict = field(default_factory=dict)  # what each attempt from the device side got
    operator: dict = field(default_factory=dict)  # what the operator's own flwr commands answered
    control_port_from_devices: str = ""
    repo: Path | None = None
    install: subprocess.CompletedProcess | None = None
    bridge_rc: int | None = None
    bridge_out: str = ""
    bridge_err: str = ""
    take: Path | None = None


def flwr(home: Path, *args: str, prefix: list[str] = ()) -> dict:
    """One `flwr` call (JSON answer) as `prefix` (a namespace) sees the network; {} when it printed no JSON."""
    out = subprocess.run([*prefix, str(BIN / "flwr"), *args, "--format", "json"], env=flower_env(home),
                         capture_output=True, text=True, timeout=120)
    text = out.stdout[out.stdout.find("{"):] if "{" in out.stdout else ""
    try:
        return json.loads(text) if text else {"success": False, "stderr": out.stderr[-500:]}
    except json.JSONDecodeError:
        return {"success": False, "stdout": out.stdout[-500:]}


def post_all(urls: list[str], ca: Path, prefix: list[str]) -> list[str]:
    """POST an empty body to each URL as `prefix` sees the network (one process): each HTTP status, or the name of
    the connection error."""
    code = ("import ssl, sys, urllib.request, urllib.error\n"
            f"ctx = ssl.create_default_context(cafile={str(ca)!r})\n"
            "for url in sys.argv[1:]:\n"
            "    try:\n"
            "        req = urllib.request.Request(url, data=b'', method='POST')\n"
            "        print(urllib.request.urlopen(req, timeout=10, context=ctx).status)\n"
            "    except urllib.error.HTTPError as e:\n"
            "        print(e.code)\n"
            "    except (urllib.error.URLError, OSError) as e:\n"
            "        print(type(getattr(e, 'reason', e)).__name__)\n")
    out = subprocess.run([*prefix, str(BIN / "python"), "-c", code, *urls], capture_output=True, text=True,
                         timeout=120)
    answers = out.stdout.split()
    assert len(answers) == len(urls), out.stderr[-1000:]
    return answers


def attack(loop: Loop, work: Path, ca: Path, device_address: str, prefix: list[str], extra_urls: list[str]) -> list:
    """From the devices' side, against the device port: what the Control API offers (stopping a run comes later,
    once there is one). Returns what `extra_urls` answered."""
    home = work / "attacker"
    FlowerCli(home, device_address, Tls(ca))  # writes the `fedagent` connection to the device port
    _, attacker_pub = device_key(work / "device-keys", "attacker")
    app = write_project(work / "attacker-app")
    config = run_config_file(work / "attacker-config.toml", {"state-dir": str(work / "attacker-state"), "rounds": 1})
    loop.attacks["list"] = flwr(home, "list", "fedagent", prefix=prefix)
    loop.attacks["run"] = flwr(home, "run", str(app), "fedagent", "--run-config", str(config), prefix=prefix)
    loop.attacks["register"] = flwr(home, "supernode", "register", str(attacker_pub), "fedagent", prefix=prefix)
    paths = ("/v1/control/start-run", "/v1/control/register-node", "/v1/control/list-runs", "/v1/runtime/get-nodes",
             "/docs", "/v1/fleet/../control/list-runs")
    answers = post_all([f"https://{device_address}{path}" for path in paths] + extra_urls, ca, prefix)
    loop.attacks.update({f"POST {path}": answer for path, answer in zip(paths, answers)})
    return answers[len(paths):]


def fill_store(home: Path, work: Path, attempts: int = 5) -> None:
    """`facebridge run --source sample --audio sample --learn` for 10 s of the clip, one device at a time and again
    while the store holds fewer windows than a device needs: a window keeps only speech frames whose camera frames
    came no more than 0.1 s apart, which a machine loaded by other work (three bridges at once on a busy two-core
    machine) can fail to give for a whole run."""
    from bridge.audio.learn_store import LearnStore
    from fedagent.app.data_store import MIN_WINDOWS

    for _ in range(attempts):
        out = subprocess.run(facebridge_cmd("run", "--source", "sample", "--audio", "sample", "--learn",
                                            "--max-frames", "300", "--vmc", "off", "--monitor", "off",
                                            "--llf", f"127.0.0.1:{free_port()}", "--quiet"),
                             env=subprocess_env(home), cwd=work, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-1000:] + out.stderr[-2000:]
        if (home / "learn").is_dir() and len(LearnStore(home / "learn").paths()) >= MIN_WINDOWS:
            return
    raise AssertionError(f"{attempts} learning runs left fewer than {MIN_WINDOWS} windows in {home / 'learn'}")


def take_frames(take: Path) -> list[dict]:
    return [json.loads(line) for line in (take / "frames.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    work = tmp_path_factory.mktemp("loop")
    network, reason = None, Namespaces.unavailable()
    if reason is None:
        try:
            network = Namespaces().__enter__()
        except subprocess.CalledProcessError as e:
            reason = f"`{' '.join(e.cmd)}` failed ({e.stderr.strip()})"
    try:
        yield _run_loop(work, network, reason)
    finally:
        if network is not None:
            network.__exit__()


def _run_loop(work: Path, network: Namespaces | None, reason: str | None) -> Loop:
    loop = Loop(network, reason)
    server_host = network.server_ip if network else "127.0.0.1"
    on_server = network.exec_in(network.server) if network else []
    on_devices = network.exec_in(network.devices) if network else []
    port, control_port = free_port(), free_port()
    device_address = f"{server_host}:{port}"
    ca, cert, key = tls_files(work / "tls", "ca", (server_host,) if network else ())
    (work / "device-keys").mkdir()
    keys = [device_key(work / "device-keys", f"device{i}") for i in range(DEVICES)]
    homes = [work / f"device{i}" for i in range(DEVICES)]
    signing, repo, state = work / "keys", work / "repo", work / "server"
    loop.repo, loop.take = repo, work / "take"
    procs: list[subprocess.Popen] = []
    try:
        # 1. device0 fills its learning store from the sample clip and its voice; the others hold the same windows
        fill_store(homes[0], work)
        for home in homes[1:]:
            shutil.copytree(homes[0] / "learn", home / "learn")
        evaluation = work / "held-out"
        shutil.copytree(homes[0] / "learn", evaluation)  # the server's held-out store (a copy: a test needs one)
        subprocess.run(fedagent_cmd("keys", "init", "--dir", str(signing)), check=True, capture_output=True,
                       env=subprocess_env(work / "server-home"), timeout=120)

        # 2. the server, on its own machine, and three devices from theirs
        server = subprocess.Popen(on_server + fedagent_cmd(
            "server", "--host", server_host, "--port", str(port), "--control-port", str(control_port),
            "--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(ca),
            *[a for _, pub in keys for a in ("--register-key", str(pub))], "--eval-store", str(evaluation),
            "--rounds", "2", "--min-clients", str(DEVICES), "--state", str(state), "--keys", str(signing),
            "--repo", str(repo), "--wait-devices", "300", *[a for k, v in SETTINGS.items() for a in ("--set",
                                                                                                   f"{k}={v}")]),
            env=subprocess_env(work / "server-home"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(server)
        server_out = Lines(server.stdout)
        server_out.wait_for(r"waiting for \d+ device", 120, server)

        def start_client(i: int):
            client = subprocess.Popen(on_devices + fedagent_cmd(
                "client", "--superlink", device_address, "--root-certificates", str(ca), "--auth-key",
                str(keys[i][0]), "--store", str(homes[i] / "learn"), "--work", str(work / f"client{i}")),
                env=subprocess_env(homes[i]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(client)
            return client, Lines(client.stdout)

        clients = [start_client(i) for i in range(DEVICES - 1)]
        loop.clients_connected = [lines.wait_for("connected to", 180, client) for client, lines in clients]

        # 3. while the server waits for its last device: an attacker on the device side tries the Control API
        # through the device port, and the operator's own flwr works on the server machine
        control_url = f"https://{server_host}:{control_port}/v1/control/list-runs"
        answers = attack(loop, work, ca, device_address, on_devices, [control_url] if network else [])
        loop.control_port_from_devices = answers[0] if network else ""
        cli_home = state / "homes" / "cli"
        loop.operator["list"] = flwr(cli_home, "list", "fedagent", prefix=on_server)
        loop.operator["nodes"] = flwr(cli_home, "supernode", "list", "fedagent", prefix=on_server)

        # 4. device0's bridge starts before any release exists, every update setting at its default (started only
        # now to leave the CPU to the rest until here)
        bridge = subprocess.Popen(facebridge_cmd("run", "--source", "sample", "--audio", "sample", "--vmc", "off",
                                                 "--monitor", "off", "--llf", f"127.0.0.1:{free_port()}",
                                                 "--record", str(loop.take), "--quiet"),
                                  env=subprocess_env(homes[0]), cwd=work, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        procs.append(bridge)
        bridge_err = Lines(bridge.stderr)
        deadline = time.monotonic() + 180
        while not ((loop.take / "frames.jsonl").exists() and (loop.take / "frames.jsonl").stat().st_size > 0):
            assert bridge.poll() is None and time.monotonic() < deadline, "".join(bridge_err.lines)[-2000:]
            time.sleep(0.2)

        # 5. the last device joins and the run starts; the attacker tries to stop it at once
        clients.append(start_client(DEVICES - 1))
        loop.clients_connected.append(clients[-1][1].wait_for("connected to", 180, clients[-1][0]))
        events = state / "server" / "events.jsonl"
        deadline = time.monotonic() + 300
        while not (events.exists() and '"status": "started"' in events.read_text()):
            assert server.poll() is None and time.monotonic() < deadline, "".join(server_out.lines)[-3000:]
            time.sleep(0.2)
        run_id = json.loads(events.read_text().splitlines()[0])["run_id"]
        loop.attacks["stop"] = flwr(work / "attacker", "stop", str(run_id), "fedagent", prefix=on_devices)

        # 6. the rounds end with signed releases; the devices leave
        server.wait(600)
        server_out.join(10)
        loop.server_out, loop.server_rc = "".join(server_out.lines), server.returncode
        for client, _ in clients:
            client.send_signal(signal.SIGTERM)
        for client, _ in clients:
            client.wait(60)

        # 7. device0 installs the release into its own store while its bridge runs; the bridge takes it live
        loop.install = subprocess.run(fedagent_cmd("update", "install", "--from", str(repo), "--trust",
                                                   str(signing / "trust.json")),
                                      capture_output=True, text=True, timeout=180, env=subprocess_env(homes[0]))
        deadline = time.monotonic() + 60
        while not any("lipsync now runs r" in line for line in bridge_err.lines) and time.monotonic() < deadline:
            assert bridge.poll() is None, "".join(bridge_err.lines)[-2000:]
            time.sleep(0.5)
        time.sleep(3.0)  # some frames of the new release, if it came
        bridge.send_signal(signal.SIGTERM)
        loop.bridge_out = bridge.stdout.read()  # the run's summary (its stderr goes to bridge_err)
        bridge.wait(120)
        bridge_err.join(10)
        loop.bridge_rc, loop.bridge_err = bridge.returncode, "".join(bridge_err.lines)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(procs):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return loop


def needs_network(loop: Loop) -> None:
    if loop.network is None:
        pytest.skip(f"{loop.no_network}: the loop ran on 127.0.0.1, so there is no other address to try")


def test_two_secagg_rounds_of_three_devices_end_in_a_signed_release(loop):
    assert loop.server_rc == 0, loop.server_out[-3000:]
    assert len(loop.clients_connected) == DEVICES
    for rnd in (1, 2):
        for stage in ("setup", "share_keys", "collect_masked_vectors", "unmask"):
            assert f"round {rnd}  {stage}" in loop.server_out, loop.server_out[-3000:]
    assert re.search(r"published rounds \[1", loop.server_out), loop.server_out[-2000:]
    assert loop.install.returncode == 0, loop.install.stdout + loop.install.stderr
    assert "lipsync" in loop.install.stdout


def test_devices_on_another_address_connect_to_the_fleet_api_and_train(loop):
    needs_network(loop)
    assert all(f"connected to {loop.network.server_ip}:" in line for line in loop.clients_connected)
    assert loop.server_rc == 0 and "round 2  unmask" in loop.server_out, loop.server_out[-3000:]


def test_the_device_port_refuses_the_control_api_to_devices(loop):
    for name in ("list", "stop", "run", "register"):
        assert loop.attacks[name].get("success") is not True, (name, loop.attacks[name])
    for name, answer in loop.attacks.items():
        if name.startswith("POST"):
            assert answer == "404", (name, answer)
    # nothing the attacker tried happened: no run of theirs, their key not registered, the server's run not stopped
    assert loop.operator["list"].get("runs") == [], loop.operator["list"]
    assert len(loop.operator["nodes"]["nodes"]) == DEVICES, loop.operator["nodes"]
    assert loop.server_rc == 0 and "round 2  unmask" in loop.server_out, loop.server_out[-3000:]


def test_the_control_port_is_not_reachable_from_another_address(loop):
    needs_network(loop)
    assert loop.control_port_from_devices == "ConnectionRefusedError", loop.control_port_from_devices


def test_the_operators_flwr_commands_work_on_the_server_machine(loop):
    assert loop.operator["list"].get("success") is True, loop.operator["list"]
    assert loop.operator["nodes"].get("success") is True, loop.operator["nodes"]
    online = [n for n in loop.operator["nodes"]["nodes"] if n.get("status") == "online"]
    assert len(online) == DEVICES - 1  # the last device joins after these calls


def test_a_bridge_started_before_the_first_release_takes_it_live_without_losing_a_frame(loop):
    assert loop.bridge_rc == 0, loop.bridge_err[-2000:]
    sent, dropped = (int(x) for x in re.search(r"(\d+) frames sent, .*?, (\d+) dropped", loop.bridge_out).groups())
    frames = take_frames(loop.take)
    seqs = [f["seq"] for f in frames]
    # --record keeps every frame (the clip is read in step with the pipeline): none dropped, none missing
    assert dropped == 0 and len(frames) == sent, loop.bridge_out[-1000:]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a frame is missing from the take"
    installed = re.search(r"lipsync now runs (r\d+-\S+)", loop.bridge_err)
    assert installed, loop.bridge_err[-2000:]
    versions = [f["model_versions"].get("lipsync", "") for f in frames]
    first = versions.index(installed.group(1).rstrip(".,;"))
    assert first > 0 and not versions[0].startswith("r"), "the bridge ran the shipped adapter before the release"
    assert set(versions[first:]) == {versions[first]}, "the release serves from one frame on, and stays"
