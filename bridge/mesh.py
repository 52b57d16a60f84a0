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
# MediaPipe's attention mesh (face_landmark_with_attention, FaceMesh refine_landmarks) refines these mesh points from
# its own heads (mediapipe/modules/face_landmark/tensors_to_face_landmarks_with_attention.pbtxt, Apache-2.0): the
# 80 lip points in the order of its lips output, and per eye the 71 points of its eye output, in ARKit's order
# [subject's left eye, subject's right eye]; each eye's first 16 are EYE_CONTOURS' lid points.
LIP_REFINEMENT = (
    61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291, 185, 40, 39, 37, 0, 267, 269, 270, 409,
    78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308, 191, 80, 81, 82, 13, 312, 311, 310, 415,
    76, 77, 90, 180, 85, 16, 315, 404, 320, 307, 306, 184, 74, 73, 72, 11, 302, 303, 304, 408,
    62, 96, 89, 179, 86, 15, 316, 403, 319, 325, 292, 183, 42, 41, 38, 12, 268, 271, 272, 407,
)
EYE_REFINEMENT = (
    (263, 249, 390, 373, 374, 380, 381, 382, 362, 466, 388, 387, 386, 385, 384, 398, 359, 255, 339, 254, 253, 252,
     256, 341, 463, 467, 260, 259, 257, 258, 286, 414, 446, 261, 448, 449, 450, 451, 452, 453, 464, 342, 445, 444,
     443, 442, 441, 413, 265, 353, 276, 283, 282, 295, 372, 340, 346, 347, 348, 349, 350, 357, 465, 383, 300, 293,
     334, 296, 336, 285, 417),
    (33, 7, 163, 144, 145, 153, 154, 155, 133, 246, 161, 160, 159, 158, 157, 173, 130, 25, 110, 24, 23, 22, 26,
     112, 243, 247, 30, 29, 27, 28, 56, 190, 226, 31, 228, 229, 230, 231, 232, 233, 244, 113, 225, 224, 223, 222,
     221, 189, 35, 124, 46, 53, 52, 65, 143, 111, 117, 118, 119, 120, 121, 128, 245, 156, 70, 63, 105, 66, 107, 55,
     193),
)
