"""OSC remote control as the Live Link Face app offers it, over real sockets to a `facebridge run` subprocess:
/RecordStart with slate and take starts a take named after them, /RecordStop ends it, replies go to the target."""
from __future__ import annotations

import json
import socket
import subprocess
import threading

from pythonosc.dispatcher import Dispatcher
from pythonosc.osc_server import BlockingOSCUDPServer
from pythonosc.udp_client import SimpleUDPClient

from tests.helpers import facebridge_cmd, free_udp_port, subprocess_env, wait_until


def replies_server():
    replies: list[tuple[str, list]] = []
    dispatcher = Dispatcher()
    dispatcher.set_default_handler(lambda address, *args: replies.append((address, list(args))))
    server = BlockingOSCUDPServer(("127.0.0.1", 0), dispatcher)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, replies


def answered(replies, address: str) -> list | None:
    return next((args for a, args in replies if a == address), None)


def test_record_start_and_stop_over_osc_make_a_take_named_after_slate_and_take(tmp_path, isolated_home):
    port = free_udp_port()
    takes = tmp_path / "takes"
    bridge = subprocess.Popen(facebridge_cmd("run", "--source", "sample", "--osc-remote", str(port), "--takes-dir",
                                             str(takes), "--llf", "off", "--vmc", "off", "--monitor", "off", "--quiet"),
                              env=subprocess_env(isolated_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    server, replies = replies_server()
    osc = SimpleUDPClient("127.0.0.1", port)
    lines: list[str] = []  # the bridge's stderr as it comes

    def read():
        for line in bridge.stderr:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # the listener is up once it confirms the send target (it opens before the models load)
        assert wait_until(lambda: osc.send_message("/OSCSetSendTarget", ["127.0.0.1", server.server_address[1]])
                          or answered(replies, "/OSCSetSendTargetConfirm") is not None, timeout=90, step=0.5), \
            "".join(lines) if bridge.poll() is not None else "no confirmation"
        # what a packet holds never stops the listener: garbage, wrong argument types
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            raw.sendto(b"\x00garbage, not OSC\xff", ("127.0.0.1", port))
        # a command with wrong arguments is named in one line; UDP may lose a datagram on a loaded machine, so it is
        # sent again until that line comes (the listener handles datagrams in order, on one thread)
        assert wait_until(lambda: osc.send_message("/RecordStart", ["Scene", "not a number"])
                          or any("ignored" in line for line in lines), timeout=60, step=1.0), lines[-5:]
        osc.send_message("/RecordStart", ["Scene 7", 3])
        assert wait_until(lambda: answered(replies, "/RecordStartConfirm") is not None, timeout=30)
        take = takes / "Scene_7_3"
        assert wait_until(lambda: (take / "frames.jsonl").exists()
                          and len((take / "frames.jsonl").read_text().splitlines()) >= 10, timeout=90)
        osc.send_message("/RecordStop", [])
        assert wait_until(lambda: answered(replies, "/RecordStopConfirm") is not None, timeout=30)
        osc.send_message("/BatteryQuery", [])
        assert wait_until(lambda: answered(replies, "/Battery") is not None, timeout=10)
        assert bridge.poll() is None, "the bridge keeps running"
    finally:
        bridge.terminate()
        bridge.wait(60)
        reader.join(10)
        server.shutdown()
        server.server_close()
    err = "".join(lines)
    timecode, csv, movie = answered(replies, "/RecordStopConfirm")
    assert csv == str(take / "frames.csv") and movie == ""
    assert len(answered(replies, "/RecordStartConfirm")[0].split(":")) == 4  # HH:MM:SS:FF.mmm
    meta = json.loads((take / "take.json").read_text())
    assert meta["complete"] and meta["frames"] >= 10
    assert answered(replies, "/Battery") == [1.0]
    assert [p.name for p in takes.iterdir()] == ["Scene_7_3"], "one take, named after slate and take"
    assert sum("/RecordStart ['Scene', 'not a number'] ignored" in line for line in lines) >= 1, err
    assert "Traceback" not in err


def test_listening_beyond_loopback_needs_an_allow_list(isolated_home):
    proc = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "2", "--osc-remote",
                                         f"0.0.0.0:{free_udp_port()}", "--llf", "off", "--vmc", "off",
                                         "--monitor", "off"),
                          env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.strip().splitlines() if line.startswith("facebridge: error:")]
    assert len(lines) == 1 and "--osc-allow" in lines[0], proc.stderr
