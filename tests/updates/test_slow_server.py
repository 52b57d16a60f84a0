"""A server that drips its response: the status line, then one header byte every 5 s. The deadline covers the
whole request, headers included (a watchdog shuts the socket), so `fedagent update install --deadline 5` ends
as `network` within seconds of its deadline instead of holding the install lock for minutes, release 1 keeps
serving and the next check installs."""
import time

from tests.updates.kit import cli_install
from tests.updates.test_hostile_metadata import recovers


def _drip_headers(handler, every_s: float = 5.0, for_s: float = 120.0) -> None:
    handler.close_connection = True
    end = time.monotonic() + for_s
    try:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        handler.wfile.flush()
        while time.monotonic() < end:
            handler.wfile.write(b"X")
            handler.wfile.flush()
            time.sleep(every_s)
    except OSError:
        pass


def test_headers_dripping_one_byte_every_5_s_end_at_the_deadline(publisher, device, server, tmp_path):
    publisher.publish()
    server.rules["/metadata/timestamp.json"] = _drip_headers
    t0 = time.monotonic()
    code, out = cli_install(server.url, device.state, tmp_path / "home", "--deadline", "5", timeout=200)
    took = time.monotonic() - t0
    assert (code, out["reason"]) == (26, "network"), out
    assert "deadline" in out["message"]
    assert took < 60, f"the install ran {took:.0f} s with --deadline 5"  # the dripping server would last 120 s
    recovers(publisher, device, server)  # the lock was released: the next check installs


def test_a_dripping_file_body_ends_at_the_deadline_in_process(publisher, device, server):
    from bridge.updates.install import Limits

    publisher.publish()
    path = publisher.url_of()
    server.rules[path] = lambda handler: _drip_headers(handler, every_s=0.5, for_s=30)
    t0 = time.monotonic()
    device.refused(server.url, "network", limits=Limits(deadline_s=2.0))
    assert time.monotonic() - t0 < 25
    recovers(publisher, device, server)
