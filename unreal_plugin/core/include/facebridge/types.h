// Plain data the FaceBridge stream carries, free of Unreal and protobuf types, so that the Unreal module and
// the GoogleTest suite use exactly the same code.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace facebridge {

// Names and layout for one subject (facebridge.v1.StreamHeader).
struct SubjectLayout {
  std::string subject;
  uint32_t layout_id = 0;
  std::vector<std::string> curve_names;    // ARKit-52 in Apple order
  std::vector<std::string> emotion_names;
  std::vector<std::string> viseme_names;
  std::string model_id;
  std::vector<std::pair<std::string, uint32_t>> parameter_blocks;  // name, size
  std::map<std::string, std::string> model_versions;
  double frame_rate = 0.0;

  size_t ParameterCount() const;
};

struct Timecode {
  int32_t frame = 0;
  float subframe = 0.0f;  // [0, 1)
  int32_t rate_numerator = 30;
  int32_t rate_denominator = 1;
};

struct EyeGaze {
  float yaw_deg = 0.0f;
  float pitch_deg = 0.0f;
};

// One frame for one subject (facebridge.v1.Frame), arrays index-aligned with its SubjectLayout.
struct FaceSample {
  std::string subject;
  uint32_t layout_id = 0;
  uint64_t seq = 0;
  double capture_time = 0.0;  // Unix seconds
  double source_time = 0.0;   // bridge monotonic seconds
  Timecode timecode;
  bool face_found = false;
  std::vector<float> curves;
  float head_yaw_deg = 0.0f, head_pitch_deg = 0.0f, head_roll_deg = 0.0f;  // FaceBridge convention
  float head_translation_cm[3] = {0.0f, 0.0f, 0.0f};                       // camera space
  EyeGaze eye_left, eye_right;
  std::vector<float> emotions;
  std::vector<float> visemes;
  std::vector<float> parameters;
  float confidence = 0.0f;
  uint64_t dropped_frames = 0;
};

}  // namespace facebridge
