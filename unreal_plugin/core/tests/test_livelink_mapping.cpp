#include <cmath>

#include <gtest/gtest.h>

#include "facebridge/livelink_mapping.h"

using namespace facebridge;

namespace {
SubjectLayout Layout() {
  SubjectLayout l;
  l.subject = "Anna";
  l.curve_names = {"eyeBlinkLeft", "jawOpen"};
  l.emotion_names = {"happy", "sad"};
  return l;
}
double Norm(const Quat& q) { return std::sqrt(q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w); }
}  // namespace

TEST(LiveLinkMapping, PropertyNamesAndValuesAreIndexAligned) {
  const SubjectLayout layout = Layout();
  FaceSample s;
  s.curves = {0.25f, 0.75f};
  s.emotions = {0.9f, 0.1f};
  s.head_yaw_deg = 5.0f;
  s.eye_right.pitch_deg = -2.0f;
  s.confidence = 0.5f;
  const auto names = PropertyNames(layout);
  const auto values = PropertyValues(layout, s);
  ASSERT_EQ(names.size(), values.size());
  ASSERT_EQ(names.size(), 2u + 2u + 7u + 1u);
  EXPECT_EQ(names[1], "jawOpen");
  EXPECT_FLOAT_EQ(values[1], 0.75f);
  EXPECT_EQ(names[2], "Emotion.happy");
  EXPECT_FLOAT_EQ(values[2], 0.9f);
  EXPECT_EQ(names[4], "HeadYaw");
  EXPECT_FLOAT_EQ(values[4], 5.0f);
  EXPECT_EQ(names[10], "RightEyePitch");
  EXPECT_FLOAT_EQ(values[10], -2.0f);
  EXPECT_EQ(names.back(), "Confidence");
  EXPECT_FLOAT_EQ(values.back(), 0.5f);
}

TEST(LiveLinkMapping, MissingEmotionsAreZero) {
  FaceSample s;
  s.curves = {0.0f, 0.0f};
  const auto values = PropertyValues(Layout(), s);
  EXPECT_EQ(values.size(), PropertyNames(Layout()).size());
  EXPECT_FLOAT_EQ(values[2], 0.0f);
}

TEST(LiveLinkMapping, RotatorToQuatMatchesUnreal) {
  // Pure yaw of 90 degrees is a rotation about +Z.
  Quat q = RotatorToQuat(Rotator{0.0, 90.0, 0.0});
  EXPECT_NEAR(q.z, std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(q.w, std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(q.x, 0.0, 1e-12);
  // Pure pitch of 90 degrees: FRotator(90,0,0).Quaternion() = (0, -sqrt(.5), 0, sqrt(.5)).
  q = RotatorToQuat(Rotator{90.0, 0.0, 0.0});
  EXPECT_NEAR(q.y, -std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(q.w, std::sqrt(0.5), 1e-12);
  // Pure roll of 90 degrees: (-sqrt(.5), 0, 0, sqrt(.5)).
  q = RotatorToQuat(Rotator{0.0, 0.0, 90.0});
  EXPECT_NEAR(q.x, -std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(Norm(RotatorToQuat(Rotator{13.0, -47.0, 120.0})), 1.0, 1e-12);
}

TEST(LiveLinkMapping, HeadSignsFollowTheDocumentedConvention) {
  const Rotator r = HeadRotator(10.0f, 5.0f, 3.0f);  // subject turns left, looks up, tilts left
  EXPECT_DOUBLE_EQ(r.yaw, -10.0);
  EXPECT_DOUBLE_EQ(r.pitch, 5.0);
  EXPECT_DOUBLE_EQ(r.roll, -3.0);
}

TEST(LiveLinkMapping, SkeletonHasAParentForEveryBone) {
  ASSERT_EQ(BoneNames().size(), BoneParents().size());
  for (size_t i = 0; i < BoneParents().size(); ++i) EXPECT_LT(BoneParents()[i], static_cast<int>(i));
  FaceSample s;
  s.head_yaw_deg = 30.0f;
  const auto rotations = BoneRotations(s);
  ASSERT_EQ(rotations.size(), BoneNames().size());
  EXPECT_DOUBLE_EQ(rotations[0].w, 1.0);
  EXPECT_NEAR(rotations[1].z, -std::sin(15.0 * M_PI / 180.0), 1e-9);
}
