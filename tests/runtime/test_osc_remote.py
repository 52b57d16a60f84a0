"""The OSC listener's policy: loopback unless an allow list is given, packets from other addresses dropped unread,
replies never sent to a third machine; slates made safe as directory names."""
import pytest

from bridge.errors import FaceBridgeError
from bridge.runtime.osc_remote import OscRemote, slate_name


def test_beyond_loopback_only_allowed_addresses_are_read():
    with pytest.raises(FaceBridgeError, match="--osc-allow"):
        OscRemote("0.0.0.0", 0, recording=None)
    with pytest.raises(FaceBridgeError, match="not an IP address"):
        OscRemote("0.0.0.0", 0, recording=None, allow=("studio-pc",))
    remote = OscRemote("127.0.0.1", 0, recording=None, allow=("10.0.0.5",))
    try:
        server = remote._server
        assert server.verify_request(None, ("127.0.0.1", 5000))
        assert server.verify_request(None, ("10.0.0.5", 5000))
        assert not server.verify_request(None, ("10.0.0.6", 5000))
        with pytest.raises(ValueError, match="neither the sender nor on the allow list"):
            remote._set_target(("127.0.0.1", 5000), "192.168.1.9", 9000)
        assert remote.target is None
    finally:
        remote.close()


@pytest.mark.parametrize("slate, expected", [("Scene 7", "Scene_7"), ("../../etc", "etc"), ("", "take"),
                                             ("a" * 100, "a" * 64), (12, "12")])
def test_slates_become_safe_directory_names(slate, expected):
    assert slate_name(slate) == expected
