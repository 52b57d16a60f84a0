"""Face-mesh index sets (MediaPipe's 468-point topology), defined once for the single-face pipeline and the
batched multi-stream tracker.

Per-eye tuples are in ARKit's order: [subject's left eye, subject's right eye]. The subject's left eye appears on
the image's right for an unmirrored camera.
"""
from __future__ import annotations

NUM_POINTS = 468

# Eye corners, image-left first.
EYE_CORNERS = ((362, 263), (33, 133))
# (upper, lower) lid point pairs across each eye: outer third, middle, inner third.
EYE_LID_PAIRS = (((385, 380), (386, 374), (387, 373)), ((158, 153), (159, 145), (160, 144)))
# The 16 mesh points of each eye's lid contour, in the order of the iris model's first 16 contour points (lower lid
# corner to corner, then the upper lid), so the iris model's lids can replace them (as MediaPipe's refine_landmarks
# does). Their mean stands in for the iris centre when no iris points are given.
EYE_CONTOURS = (
    (263, 249, 390, 373, 374, 380, 381, 382, 362, 466, 388, 387, 386, 385, 384, 398),
    (33, 7, 163, 144, 145, 153, 154, 155, 133, 246, 161, 160, 159, 158, 157, 173),
)
# Rigid points for head pose: forehead, nose bridge, eye corners, cheekbones, face outline. The mouth, jaw, lids and
# brows move with expression and would drag the pose.
RIGID_POINTS = (
    1, 2, 4, 5, 6, 8, 9, 10, 151, 168, 195, 197, 33, 133, 362, 263, 130, 359, 127, 356, 234, 454, 93, 323,
    116, 345, 117, 346, 118, 347, 50, 280, 101, 330, 36, 266, 67, 297, 109, 338, 103, 332, 54, 284, 21, 251,
    162, 389, 139, 368, 71, 301, 98, 327, 129, 358, 64, 294, 48, 278, 115, 344, 45, 275, 51, 281,
)
