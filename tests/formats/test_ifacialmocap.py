"""The iFacialMocap datagram: the app's own names (as its developer page's example frame spells them), whole
percent, and the head and eye angles in degrees."""
import numpy as np

from bridge.formats.ifacialmocap import IFM_NAMES, encode_ifm
from bridge.frame import ARKIT_INDEX, FaceFrame

# names as they appear in the example frame on ifacialmocap.com/for-developer
APP_NAMES = {"mouthSmile_R", "eyeLookOut_L", "mouthUpperUp_L", "eyeWide_R", "mouthClose", "mouthPucker",
             "mouthRollLower", "eyeBlink_R", "eyeLookDown_L", "cheekSquint_R", "eyeBlink_L", "tongueOut", "jawRight",
             "eyeLookIn_R", "mouthDimple_L", "mouthPress_L", "eyeSquint_L", "mouthRight", "mouthShrugLower",
             "eyeLookUp_R", "cheekPuff", "jawForward", "mouthLowerDown_L", "mouthFrown_L", "mouthShrugUpper",
             "browOuterUp_L", "browInnerUp", "browDown_R", "mouthRollUpper", "mouthFunnel", "mouthStretch_R",
             "jawOpen", "jawLeft", "noseSneer_R", "mouthLeft"}


def test_the_names_are_the_apps():
    assert APP_NAMES <= set(IFM_NAMES) and len(set(IFM_NAMES)) == 52


def test_a_frame_reads_back_as_whole_percent_and_degrees():
    frame = FaceFrame(seq=1, t_capture=0.0, t_capture_mono=0.0, face_found=True)
    frame.blendshapes[ARKIT_INDEX["eyeBlinkLeft"]] = 0.876
    frame.blendshapes[ARKIT_INDEX["jawOpen"]] = np.nan
    frame.head_rotation = np.array([10.0, 5.0, -2.0], np.float32)  # yaw, pitch, roll
    frame.head_translation = np.array([1.0, 2.0, 50.0], np.float32)  # cm, camera space
    frame.eye_left = np.array([3.0, -1.0], np.float32)
    text = encode_ifm(frame).decode("utf-8")
    shapes, _, pose = text.partition("=")
    values = dict(item.rsplit("-", 1) for item in shapes.split("|") if item)
    assert values["eyeBlink_L"] == "88" and values["jawOpen"] == "0"
    parts = dict(item.split("#") for item in pose.split("|") if item)
    head = [float(v) for v in parts["head"].split(",")]
    assert head == [-5.0, -10.0, -2.0, 0.01, -0.02, -0.5]
    assert [float(v) for v in parts["leftEye"].split(",")] == [1.0, -3.0, 0.0]
    assert text.endswith("|")
