// How a FaceBridge subject appears in Unreal Live Link, as plain data: property (curve) names and values for
// the Basic role, and bones with Unreal-convention rotations for the Animation role.
#pragma once

#include <string>
#include <vector>

#include "facebridge/types.h"

namespace facebridge {

// Property names: the layout's curves, then emotions ("Emotion.happy"), then head and eye angles in Live Link
// Face's names (HeadYaw, HeadPitch, HeadRoll, LeftEyeYaw, LeftEyePitch, RightEyeYaw, RightEyePitch) and
// "Confidence", so that Live Link Face-style Anim Blueprints work unchanged.
std::vector<std::string> PropertyNames(const SubjectLayout& layout);
// Values index-aligned with PropertyNames(layout). Emotions the sample lacks are 0.
std::vector<float> PropertyValues(const SubjectLayout& layout, const FaceSample& sample);

// Unreal's FRotator in degrees (Pitch, Yaw, Roll) and the quaternion FRotator::Quaternion() gives for it.
struct Rotator {
  double pitch = 0.0, yaw = 0.0, roll = 0.0;
};
struct Quat {
  double x = 0.0, y = 0.0, z = 0.0, w = 1.0;
};
Quat RotatorToQuat(const Rotator& r);

// FaceBridge head angles (+yaw = subject turns to own left, +pitch = up, +roll = toward own left shoulder) as
// an Unreal rotator for an avatar facing +X: a turn to the avatar's left is negative Unreal yaw, up is
// positive pitch, toward the left shoulder is negative roll.
Rotator HeadRotator(float yaw_deg, float pitch_deg, float roll_deg);

// Animation role skeleton: "root" > "head" > ("eye_left", "eye_right").
const std::vector<std::string>& BoneNames();
const std::vector<int>& BoneParents();
// One rotation per bone (root is identity; eyes are relative to the head).
std::vector<Quat> BoneRotations(const FaceSample& sample);

}  // namespace facebridge
