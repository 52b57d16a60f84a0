"""The monitor server: who may connect (loopback by default, a token beyond it, no other web site, no rebound
host name), and the live WebSocket: state at the page's pace, preview images only when asked."""
from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import cv2
import numpy as np
import pytest

from bridge.errors import FaceBridgeError
from bridge.monitor.server import MonitorServer
from bridge.runtime.session import OutputConfig, RunConfig
from bridge.stats import RunStats
from tests.helpers import http_get, running_session


def test_beyond_loopback_the_monitor_needs_a_token():
    with pytest.raises(FaceBridgeError, match="--monitor-token"):
        MonitorServer("0.0.0.0:0", RunStats())
    with pytest.raises(FaceBridgeError, match="HOST:PORT"):
        MonitorServer("8910", RunStats())


def test_a_token_guards_everything_but_the_probes_and_the_page_sets_a_cookie():
    server = MonitorServer("127.0.0.1:0", RunStats(), token="s3cret")
    try:
        url = server.url
        assert http_get(url + "metrics")[0] == 401
        assert http_get(url + "metrics", {"Authorization": "Bearer nope"})[0] == 401
        assert http_get(url + "metrics", {"Authorization": "Bearer s3cret"})[0] == 200
        assert http_get(url + "healthz")[0] == 200 and http_get(url + "readyz")[0] == 503
        status, headers, _ = http_get(url + "?token=s3cret")
        assert status == 200 and "facebridge_monitor=s3cret" in headers["Set-Cookie"]
        assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
        assert http_get(url + "static/monitor.js", {"Cookie": "facebridge_monitor=s3cret"})[0] == 200
    finally:
        server.close()


def test_other_web_sites_and_rebound_host_names_are_refused():
    server = MonitorServer("127.0.0.1:0", RunStats())
    try:
        url = server.url
        assert http_get(url + "api/status", {"Origin": "https://evil.example"})[0] == 403
        assert http_get(url + "api/status", {"Host": f"evil.example:{server.port}"})[0] == 403
        assert http_get(url + "api/status", {"Origin": url.rstrip("/")})[0] == 200
        assert http_get(url + "api/status")[0] == 200, "tools without an Origin (curl, Prometheus) are welcome"
    finally:
        server.close()


def test_a_busy_default_port_falls_back_to_a_free_one_and_a_chosen_one_fails():
    first = MonitorServer("127.0.0.1:0", RunStats())
    try:
        address = f"127.0.0.1:{first.port}"
        with pytest.raises(FaceBridgeError, match="--monitor HOST:PORT"):
            MonitorServer(address, RunStats())
        second = MonitorServer(address, RunStats(), fallback=True)
        assert second.port != first.port
        second.close()
    finally:
        first.close()


async def _watch(url: str, seconds: float, preview: bool, images: int = 0) -> dict:
    """What a page receives in `seconds` (longer, up to 60 s, until `images` preview images came: a busy machine
    sends fewer)."""
    seen = {"hello": None, "states": [], "previews": [], "images": []}
    async with aiohttp.ClientSession() as client, client.ws_connect(url.replace("http", "ws") + "ws") as ws:
        if preview:
            await ws.send_str(json.dumps({"preview": True}))
        start = time.monotonic()
        end = start + seconds
        while time.monotonic() < end or (len(seen["images"]) < images and time.monotonic() < start + 60):
            try:
                msg = await ws.receive(timeout=max(0.5, end - time.monotonic()))
            except asyncio.TimeoutError:
                break
            if msg.type == aiohttp.WSMsgType.BINARY:
                seen["images"].append(msg.data)
            elif msg.type == aiohttp.WSMsgType.TEXT:
                m = json.loads(msg.data)
                if m["type"] == "hello":
                    seen["hello"] = m
                else:
                    seen["states" if m["type"] == "state" else "previews"].append(m)
    return seen


def test_the_websocket_streams_state_at_the_page_pace_and_preview_images_only_when_asked(tmp_path):
    config = RunConfig(source="sample", monitor="127.0.0.1:0", status_line=False, takes_dir=str(tmp_path),
                       outputs=OutputConfig(llf=None, vmc=None))
    with running_session(config) as session:
        while session.stats.sent < 5:
            time.sleep(0.1)
        plain = asyncio.run(_watch(session.monitor.url, 2.0, preview=False))
        assert session.feed._preview_pages == 0 and not session.feed._images, "nobody asked: no image kept"
        watched = asyncio.run(_watch(session.monitor.url, 2.5, preview=True, images=2))
        end = time.monotonic() + 10
        while session.feed._preview_pages and time.monotonic() < end:
            time.sleep(0.05)
        assert session.feed._preview_pages == 0, "a page that left stops the preview"
    assert plain["hello"]["blendshapes"][17] == "jawOpen" and len(plain["hello"]["emotions"]) == 7
    assert 2 <= len(plain["states"]) <= 30, "at most 10 updates a second"
    assert not plain["previews"] and not plain["images"]
    faces = [s["face"] for s in plain["states"] if s["face"]]
    assert faces and len(faces[-1]["blendshapes"]) == 52 and faces[-1]["seq"] > faces[0]["seq"]
    state = plain["states"][-1]
    assert state["stats"]["fps"] > 0 and state["backends"] and state["models"] and state["controls"]
    assert set(state["stats"]["sinks"]) == {"recorder"}
    images = watched["images"]  # the watch may end between an image's landmarks and its JPEG
    assert len(images) >= 2 and len(watched["previews"]) - len(images) in (0, 1)
    meta, jpeg = watched["previews"][len(images) - 1], images[-1]
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape[1] == meta["width"] <= 480 and image.shape[0] == meta["height"]
    if meta["landmarks"]:
        points = np.asarray(meta["landmarks"]).reshape(468, 2)
        assert (points >= -50).all() and (points[:, 0] <= meta["width"] + 50).all()
