"""A device clock set back: TUF judges expiry by the device's clock, so a clock 30 days behind the device's own
last successful check would accept metadata that expired long ago. The installer refuses (`clock`) when the
clock reads more than an hour before that check; the real `fedagent update install` runs with its process clock
set back (freezegun in that process, the same code path), and once the clock is right a valid release installs."""
from datetime import datetime, timedelta, timezone

from freezegun import freeze_time

from bridge.updates.floors import CLOCK_TOLERANCE
from bridge.updates.store import StateDir
from tests.updates.kit import cli_install
from tests.updates.test_hostile_metadata import recovers


def _set_back(days: float) -> str:
    when = datetime.now(timezone.utc) - timedelta(days=days)
    return f"from freezegun import freeze_time\nfreeze_time({when.isoformat()!r}, tick=True).start()\n"


def test_a_clock_set_back_30_days_is_refused_and_never_installs_expired_metadata(publisher, device, server,
                                                                                 tmp_path):
    publisher.publish(expires={"timestamp": timedelta(days=-10)})  # metadata that expired 10 days ago
    code, out = cli_install(server.url, device.state, tmp_path / "home")
    assert (code, out["reason"]) == (14, "expired"), out  # with the right clock: expired
    code, out = cli_install(server.url, device.state, tmp_path / "home", python_prefix=_set_back(30))
    assert (code, out["reason"]) == (30, "clock"), out  # set back 30 days, it would look fresh: refused
    assert "days before its last successful update check" in out["message"] and "NTP" in out["message"]
    assert StateDir(device.state).read().last_refusal["reason"] == "clock"
    recovers(publisher, device, server)


def test_a_clock_within_the_tolerance_of_the_last_check_still_installs(publisher, device, server):
    release = publisher.publish()
    with freeze_time(datetime.now(timezone.utc) - CLOCK_TOLERANCE / 2, tick=True):
        assert device.install(server.url)[0].release == release
    checked = StateDir(device.state).read().checked_utc
    assert checked >= (datetime.now(timezone.utc) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_last_check_time_never_goes_back(publisher, device, server):
    before = StateDir(device.state).read().checked_utc
    with freeze_time(datetime.now(timezone.utc) - CLOCK_TOLERANCE / 2, tick=True):
        device.install(server.url)
    assert StateDir(device.state).read().checked_utc == before
