"""/metrics, /healthz and /readyz of a running bridge, read as Prometheus and a probe read them; the metrics need
only a RunStats, so `facebridge serve` can expose the same ones."""
from __future__ import annotations

import json
import time

from prometheus_client.parser import text_string_to_metric_families

from bridge.monitor.health import readiness
from bridge.monitor.metrics import metrics_registry, metrics_text
from bridge.runtime.session import OutputConfig, RunConfig
from bridge.runtime.swap import SwapEvent
from bridge.stats import RunStats
from tests.helpers import http_get, running_session, udp_collector


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(family, **labels) -> float:
    return next(s.value for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items()))


def test_a_running_bridge_answers_metrics_health_and_readiness(tmp_path):
    with udp_collector() as (port, packets):
        config = RunConfig(source="sample", monitor="127.0.0.1:0", status_line=False, takes_dir=str(tmp_path),
                           outputs=OutputConfig(llf=f"127.0.0.1:{port}", vmc=None))
        with running_session(config) as session:
            url = session.monitor.url
            deadline = time.monotonic() + 60
            while session.stats.sent < 20 and time.monotonic() < deadline:
                time.sleep(0.1)
            status, headers, body = http_get(url + "metrics")
            ready_status, _, ready = http_get(url + "readyz")
            alive_status, _, alive = http_get(url + "healthz")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    m = _families(body.decode())
    assert _value(m["facebridge_frames_sent"]) >= 20
    assert _value(m["facebridge_sink_packets"], sink="livelinkface") >= 1
    assert _value(m["facebridge_sink_errors"], sink="livelinkface") == 0
    assert _value(m["facebridge_fps"]) > 0 and _value(m["facebridge_models_loaded"]) == 1
    assert 0 <= _value(m["facebridge_face_lost_ratio"]) <= 1
    assert {"capture", "send"} <= {s.labels["reason"] for s in m["facebridge_frames_dropped"].samples}
    stages = {s.labels["stage"] for s in m["facebridge_stage_latency_seconds"].samples}
    assert {"landmarks", "iris", "expression"} <= stages
    count = _value(m["facebridge_stage_latency_seconds"], stage="landmarks", le="+Inf")
    assert count >= 20 and _value(m["facebridge_capture_to_send_seconds"], le="+Inf") >= 20
    assert _value(m["process_resident_memory_bytes"]) > 50e6
    assert _value(m["facebridge_update_status"], facebridge_update_status="none") == 1
    assert m["facebridge_bridge_info"].samples[0].labels["backend"]
    assert ready_status == 200 and json.loads(ready)["ready"]
    assert alive_status == 200 and json.loads(alive)["alive"]
    assert packets, "the stream itself went on"


def test_readiness_needs_loaded_models_and_a_recent_frame():
    stats = RunStats()
    ready, body = readiness(stats.snapshot())
    assert not ready and body["problems"] == ["models are still loading", "no frame produced yet"]
    stats.set_models_loaded()
    stats.frame_sent(30.0, time.perf_counter() - 10.0)
    ready, body = readiness(stats.snapshot())
    assert not ready and "no frame produced for" in body["problems"][0]
    stats.frame_sent(30.0, time.perf_counter())
    assert readiness(stats.snapshot())[0]


def test_the_metrics_need_only_a_stats_object_and_two_registries_never_collide():
    a, b = RunStats(), RunStats()
    a.frame_guarded("nonfinite", "iris", "x")
    a.swap_event(SwapEvent("iris_landmark", "shipped", 0, True, "", 0.0))
    b.set_update_status("staged")
    b.set_release("lipsync", 12)
    ma = _families(metrics_text(metrics_registry(a)).decode())
    mb = _families(metrics_text(metrics_registry(b)).decode())
    assert _value(ma["facebridge_guard_replaced_frames"], reason="nonfinite", stage="iris") == 1
    assert _value(ma["facebridge_engine_builds"], model="iris_landmark") == 1
    assert not mb["facebridge_guard_replaced_frames"].samples
    assert _value(mb["facebridge_update_status"], facebridge_update_status="staged") == 1
    assert _value(mb["facebridge_active_release"], model="lipsync") == 12
