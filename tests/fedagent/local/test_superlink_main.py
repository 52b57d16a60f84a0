"""fedagent.local.superlink_main: the devices' listener passes Flower's Fleet API and nothing else (Flower's own
SuperLink app, in process; tests/e2e/test_federation_loop.py tries it over the network from another address)."""
from __future__ import annotations

import sys

import pytest
from starlette.testclient import TestClient

from fedagent.local.superlink_main import DEVICE_PATH, fleet_only


@pytest.fixture(scope="module")
def flower_app():
    from flwr.superlink.main import create_app

    return create_app()


def test_every_route_flower_serves_is_either_a_fleet_call_or_refused_on_the_device_port(flower_app):
    from fastapi.routing import iter_route_contexts

    paths = {getattr(c, "path", None) or c.route.path for c in iter_route_contexts(flower_app.routes)}
    passed = {p for p in paths if DEVICE_PATH.fullmatch(p)}
    assert passed - {"/health"} and all(p.startswith("/v1/fleet/") for p in passed - {"/health"})
    refused = paths - passed
    assert {"/v1/control/start-run", "/v1/control/register-node", "/v1/control/stop-run",
            "/v1/control/list-runs", "/v1/runtime/get-nodes"} <= refused


def test_the_device_port_answers_404_to_control_and_runtime_calls_before_flower_sees_them(flower_app):
    device = TestClient(fleet_only(flower_app))
    for path in ("/v1/control/start-run", "/v1/control/register-node", "/v1/control/list-runs",
                 "/v1/runtime/get-nodes", "/docs", "/openapi.json", "/v1/fleet/../control/list-runs",
                 "/v1/fleet/get-run/../../control/stop-run", "/V1/CONTROL/list-runs"):
        answer = device.post(path, content=b"")
        assert answer.status_code == 404 and answer.json() == {"detail": "not served on the device port"}, path


def test_fleet_calls_reach_flower_on_the_device_port(flower_app):
    device, everything = TestClient(fleet_only(flower_app)), TestClient(flower_app)
    # an empty body is not a valid Fleet request: Flower itself answers, the same way on both listeners
    fleet = device.post("/v1/fleet/get-run", content=b"")
    assert fleet.status_code != 404
    assert fleet.status_code == everything.post("/v1/fleet/get-run", content=b"").status_code
    assert device.get("/health").status_code == 200


def test_the_control_listener_must_be_on_loopback(capsys, monkeypatch):
    from fedagent.local.superlink_main import main

    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main hands Flower its arguments through sys.argv
    rc = main(["--fleet-host", "127.0.0.1", "--fleet-port", "1", "--host", "0.0.0.0", "--port", "2",
                      "--insecure"])
    assert rc == 2 and "must listen on loopback" in capsys.readouterr().err
