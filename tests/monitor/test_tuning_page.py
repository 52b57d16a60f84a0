"""The monitor page's tuning panel in a real headless Chromium: a gain slider changes the stream at once, the
peak-hold markers show what was measured, the range walk-through sets gains, and Save stores the mapping."""
from __future__ import annotations

from bridge.calibration import CalibrationProfile
from bridge.frame import ARKIT_INDEX
from bridge.runtime.session import OutputConfig, RunConfig
from tests.helpers import running_session
from tests.monitor.test_page import _wait, browser  # noqa: F401 - browser: the fixture

BLINK = ARKIT_INDEX["eyeBlinkLeft"]

# each view of the mapping (GET /api/tuning) reaches the page 0.6 s after the bridge answered it, as on a slow link
_SLOW_VIEWS = """
  const realFetch = window.fetch;
  window.viewsOnTheirWay = 0;
  window.fetch = async (url, options) => {
    if (String(url) !== "/api/tuning") return realFetch(url, options);
    window.viewsOnTheirWay += 1;
    try {
      const answer = await realFetch(url, options);
      await new Promise((done) => setTimeout(done, 600));
      return answer;
    } finally { window.viewsOnTheirWay -= 1; }
  };
"""


def test_the_tuning_panel_changes_the_stream_at_once_and_saves_to_the_profile(
        browser, tmp_path, isolated_home):  # noqa: F811 - the fixture
    config = RunConfig(source="sample", monitor="127.0.0.1:0", status_line=False, takes_dir=str(tmp_path / "takes"),
                       outputs=OutputConfig(llf=None, vmc=None))
    with running_session(config) as session:
        page = browser.new_page(viewport={"width": 1440, "height": 960})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # 11 steps of 0.4 s: 4.4 s, longer than any gap between the sample's blinks
        page.add_init_script("window.tuningStepMs = 400")
        page.add_init_script(_SLOW_VIEWS)
        page.goto(session.monitor.url)
        page.wait_for_function("document.querySelectorAll('#tuning-bars .row').length === 52", timeout=20000)
        # peak-hold markers: the measured peaks show on the bars (the sample blinks and moves its mouth)
        _wait(lambda: page.eval_on_selector_all("#tuning-bars .peak",
                                                "ps => ps.filter(p => Number(p.dataset.peak) > 0.05).length") > 5,
              30, "peak markers")

        page.click("#tuning-bars .row[data-name='eyeBlinkLeft']")
        # the gain changes while a view asked for before it is on its way; once that old view has come, the dead
        # zone changes: the old view must not have put gain 1 back (CI saw it send gain 1 with the dead zone)
        page.wait_for_function("window.viewsOnTheirWay > 0", timeout=10000)
        page.eval_on_selector("#tuning-gain", "s => { s.value = 2; s.dispatchEvent(new Event('input')); }")
        page.wait_for_function("window.viewsOnTheirWay === 0", timeout=10000)
        page.eval_on_selector("#tuning-dead", "s => { s.value = 0.1; s.dispatchEvent(new Event('input')); }")
        tuning = session.tuning
        _wait(lambda: tuning.mapping("FaceBridge") is not None
              and tuning.mapping("FaceBridge").shape("eyeBlinkLeft").dead_zone == 0.1, 10, "the settings to arrive")
        assert tuning.mapping("FaceBridge").shape("eyeBlinkLeft").gain == 2.0

        def mapped_follows():  # the stream's frames carry the new mapping: out = clamp((raw - 0.1) / 0.9 * 2)
            view = tuning.view("FaceBridge")
            raw, out = view["raw"][BLINK], view["mapped"][BLINK]
            return raw > 0.0 and abs(out - min(1.0, max(0.0, (raw - 0.1) / 0.9 * 2))) < 0.01
        _wait(mapped_follows, 10, "the stream to follow the new gain")

        page.click("#tuning-ranges")
        page.wait_for_function("document.getElementById('message').textContent.includes('ranges set for')",
                               timeout=30000)
        page.click("#tuning-save")
        page.wait_for_function("document.getElementById('message').textContent.includes('saved the mapping')",
                               timeout=10000)
        page.close()
    stored = CalibrationProfile.load("FaceBridge", isolated_home / "profiles")
    assert stored.mapping["blendshapes"]["eyeBlinkLeft"]["dead_zone"] == 0.1
    assert "gain" in stored.mapping["blendshapes"]["eyeBlinkRight"], "the ranges set gains"
    assert not errors, errors
