#include "facebridge/livelink_mapping.h"

#include <cmath>

namespace facebridge {

namespace {
const char* const kAngleNames[] = {"HeadYaw", "HeadPitch", "HeadRoll", "LeftEyeYaw",
                                   "LeftEyePitch", "RightEyeYaw", "RightEyePitch"};
constexpr double kPi = 3.14159265358979323846;
}  // namespace

std::vector<std::string> PropertyNames(const SubjectLayout& layout) {
  std::vector<std::string> names = layout.curve_names;
  for (const auto& e : layout.emotion_names) names.push_back("Emotion." + e);
  for (const char* n : kAngleNames) names.emplace_back(n);
  names.emplace_back("Confidence");
  return names;
}

std::vector<float> PropertyValues(const SubjectLayout& layout, const FaceSample& s) {
  std::vector<float> values;
  values.reserve(layout.curve_names.size() + layout.emotion_names.size() + 8);
  for (size_t i = 0; i < layout.curve_names.size(); ++i) values.push_back(i < s.curves.size() ? s.curves[i] : 0.0f);
  for (size_t i = 0; i < layout.emotion_names.size(); ++i) {
    values.push_back(i < s.emotions.size() ? s.emotions[i] : 0.0f);
  }
  const float angles[] = {s.head_yaw_deg, s.head_pitch_deg, s.head_roll_deg, s.eye_left.yaw_deg,
                          s.eye_left.pitch_deg, s.eye_right.yaw_deg, s.eye_right.pitch_deg};
  values.insert(values.end(), std::begin(angles), std::end(angles));
  values.push_back(s.confidence);
  return values;
}

Quat RotatorToQuat(const Rotator& r) {
  // Same formula as Unreal's FRotator::Quaternion() (degrees, half angles).
  const double half = kPi / 360.0;
  const double sp = std::sin(r.pitch * half), cp = std::cos(r.pitch * half);
  const double sy = std::sin(r.yaw * half), cy = std::cos(r.yaw * half);
  const double sr = std::sin(r.roll * half), cr = std::cos(r.roll * half);
  Quat q;
  q.x = cr * sp * sy - sr * cp * cy;
  q.y = -cr * sp * cy - sr * cp * sy;
  q.z = cr * cp * sy - sr * sp * cy;
  q.w = cr * cp * cy + sr * sp * sy;
  return q;
}

Rotator HeadRotator(float yaw_deg, float pitch_deg, float roll_deg) {
  return Rotator{pitch_deg, -static_cast<double>(yaw_deg), -static_cast<double>(roll_deg)};
}

const std::vector<std::string>& BoneNames() {
  static const std::vector<std::string> names = {"root", "head", "eye_left", "eye_right"};
  return names;
}

const std::vector<int>& BoneParents() {
  static const std::vector<int> parents = {-1, 0, 1, 1};
  return parents;
}

std::vector<Quat> BoneRotations(const FaceSample& s) {
  return {Quat{}, RotatorToQuat(HeadRotator(s.head_yaw_deg, s.head_pitch_deg, s.head_roll_deg)),
          RotatorToQuat(HeadRotator(s.eye_left.yaw_deg, s.eye_left.pitch_deg, 0.0f)),
          RotatorToQuat(HeadRotator(s.eye_right.yaw_deg, s.eye_right.pitch_deg, 0.0f))};
}

}  // namespace facebridge
