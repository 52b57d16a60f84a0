"""`facebridge run --source sample --monitor 127.0.0.1:PORT` end to end: the page, /metrics, /healthz and /readyz
answer while it runs; the monitor is on by default and `--monitor off` turns it off."""
from __future__ import annotations

import json
import signal
import subprocess
import time

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import facebridge_cmd, free_tcp_port, http_get, subprocess_env


def test_a_running_bridge_serves_the_page_metrics_and_probes(tmp_path):
    port = free_tcp_port()
    url = f"http://127.0.0.1:{port}/"
    bridge = subprocess.Popen(facebridge_cmd("run", "--source", "sample", "--llf", "off", "--vmc", "off", "--quiet",
                                             "--monitor", f"127.0.0.1:{port}"),
                              env=subprocess_env(tmp_path / "home"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=tmp_path)
    try:
        deadline, ready = time.monotonic() + 120, None
        while time.monotonic() < deadline and bridge.poll() is None:
            try:
                ready = http_get(url + "readyz", timeout=2)
            except OSError:
                ready = None  # not listening yet
            if ready and ready[0] == 200:
                break
            time.sleep(0.3)
        assert ready and ready[0] == 200, (ready, bridge.poll())
        page = http_get(url)
        metrics = http_get(url + "metrics")
        alive = http_get(url + "healthz")
        script = http_get(url + "static/monitor.js")
    finally:
        bridge.send_signal(signal.SIGTERM)
        out, err = bridge.communicate(timeout=60)
    assert bridge.returncode == 0, err[-2000:]
    assert page[0] == 200 and b"FaceBridge" in page[2] and b"/static/monitor.js" in page[2]
    assert script[0] == 200 and b"WebSocket" in script[2]
    assert b"http://" not in page[2].replace(b"http://www.w3.org", b""), "nothing is loaded from elsewhere"
    names = {f.name for f in text_string_to_metric_families(metrics[2].decode())}
    assert {"facebridge_frames_sent", "facebridge_stage_latency_seconds", "process_resident_memory_bytes"} <= names
    assert alive[0] == 200 and json.loads(alive[2])["alive"]
    assert json.loads(ready[2])["models_loaded"]


def test_the_monitor_is_on_by_default_and_off_when_asked(tmp_path):
    def first_line(*extra):
        run = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "2", "--llf", "off", "--vmc",
                                            "off", *extra), capture_output=True, text=True,
                             env=subprocess_env(tmp_path / "home"), timeout=120, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-2000:]
        return run.stdout.splitlines()[0]

    assert "monitor http://127.0.0.1:" in first_line()
    assert "monitor" not in first_line("--monitor", "off")
