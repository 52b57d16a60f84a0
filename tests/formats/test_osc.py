"""formats/osc.py: the template's datagrams are python-osc's, byte for byte, and python-osc reads them back."""
from __future__ import annotations

import numpy as np
import pytest
from pythonosc.osc_bundle import OscBundle
from pythonosc.osc_message import OscMessage

from bridge.formats.osc import MAX_DATAGRAM, OscTemplate, Slot, group_into_datagrams


def plan_of(messages: int) -> list:
    """Strings of every length modulo 4 (their padding shifts the slots), ints and floats, an empty message."""
    plan = [("/a", [("i", 7), ("i", Slot("i", 0)), ("s", "xyz"), ("f", Slot("f", 0))])]
    for k in range(messages):
        plan.append((f"/val/{k}", [("s", "n" * (k % 5)), ("f", Slot("f", 1 + k)), ("f", 0.5)]))
    plan.append(("/apply", []))
    return plan


@pytest.mark.parametrize("bundle", [True, False])
def test_the_template_writes_each_frames_numbers_byte_identical_to_python_osc(bundle):
    template = OscTemplate(plan_of(80), bundle)
    rng = np.random.default_rng(1)
    for _ in range(10):
        floats, ints = rng.normal(0, 100, 81), rng.integers(-1000, 1000, 1)
        assert template.encode(floats, ints) == template.encode_with_python_osc(floats, ints)


def test_bundles_stay_under_the_datagram_limit_and_read_back_in_order():
    template = OscTemplate(plan_of(80), bundle=True)
    floats, ints = np.arange(81, dtype=np.float64) / 4, np.array([-3])
    datagrams = template.encode(floats, ints)
    assert len(datagrams) >= 2 and all(len(d) < MAX_DATAGRAM for d in datagrams)
    messages = [m for d in datagrams for m in OscBundle(d)]
    assert [m.address for m in messages] == [a for a, _ in plan_of(80)]
    assert messages[0].params == [7, -3, "xyz", 0.0]
    assert messages[5].params == ["n" * 4, 5 / 4, 0.5]


def test_unbundled_messages_are_one_datagram_each():
    datagrams = OscTemplate(plan_of(3), bundle=False).encode(np.full(4, 2.0), np.array([9]))
    assert [OscMessage(d).address for d in datagrams] == ["/a", "/val/0", "/val/1", "/val/2", "/apply"]
    assert OscMessage(datagrams[2]).params == ["n", 2.0, 0.5]


def test_a_message_that_would_pass_the_limit_starts_the_next_bundle():
    assert group_into_datagrams([b"x" * 600] * 3, bundle=True, limit=1400) == [[0, 1], [2]]
    assert group_into_datagrams([b"x" * 2000], bundle=True) == [[0]]  # one message alone, however long
