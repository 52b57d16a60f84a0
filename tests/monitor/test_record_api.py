"""Recording from the monitor page, through a real HTTP client on 127.0.0.1: the take is always inside the takes
directory whatever the subject is called, takes started within the same second (or millisecond) never collide,
and only a JSON true starts one."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

from bridge.formats.take import TakeReader
from bridge.monitor.server import MonitorServer
from bridge.runtime.control import RunControl
from bridge.runtime.recording import RecordSwitch, safe_name
from bridge.sinks.recorder import TakeRecorder
from bridge.stats import RunStats
from tests.helpers import face_frame


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_takes_from_the_page_stay_in_the_takes_dir_never_collide_and_need_a_json_true(tmp_path):
    subject = "../../escaped\n\x00"
    control = RunControl(subject, "onnxruntime")
    control.recording = switch = RecordSwitch(TakeRecorder, tmp_path / "takes", subject)
    server = MonitorServer("127.0.0.1:0", RunStats(), control=control)
    url = server.url + "api/record"
    try:
        for body in (b'{"on": "false"}', b'{"on": 1}', b'{}', b'not json'):
            status, answer = post(url, body)
            assert status == 400 and "'on' must be true or false" in answer["error"], body
            assert answer["fix"] == 'send {"on": true} to start recording, {"on": false} to stop'
        assert switch.recording is None  # nothing above started a take
        takes = []
        for seq in range(3):  # start, a frame, stop, at once again: three takes within a second
            status, answer = post(url, b'{"on": true}')
            assert status == 200 and answer["ok"], answer
            takes.append(answer["recording"])
            switch.send(face_frame(seq + 1))
            assert post(url, b'{"on": false}')[1]["ok"]
        root = (tmp_path / "takes").resolve()
        assert len(set(takes)) == 3 and not (tmp_path / "escaped").exists()
        for seq, take in enumerate(takes):
            path = (tmp_path / "takes" / take.rpartition("/")[2]).resolve()
            assert path.parent == root and str(path) == str((tmp_path / "takes").resolve() / path.name)
            assert path.name.startswith("escaped-") and [f.seq for f in TakeReader(path)] == [seq + 1]
    finally:
        server.close()
        switch.close()


def test_a_subject_becomes_one_safe_file_name():
    assert safe_name("Ada") == "Ada" and safe_name("Actor_1.v2") == "Actor_1.v2"
    assert safe_name("../../escaped") == "escaped" and safe_name("Ada Lovelace") == "Ada_Lovelace"
    for hostile in ("../../x", "..", ".", "a/b\\c", "nul\x00here", "line\nbreak", "/etc/passwd", ""):
        name = safe_name(hostile)
        assert name and "/" not in name and "\\" not in name and not name.startswith(".")
        assert all(c.isprintable() for c in name), hostile
