#include "facebridge/decoder.h"

#include <cmath>
#include <utility>

#include "facebridge/v1/facebridge.pb.h"

namespace facebridge {

size_t SubjectLayout::ParameterCount() const {
  size_t n = 0;
  for (const auto& block : parameter_blocks) n += block.second;
  return n;
}

namespace {

template <typename Repeated>
bool AllFinite(const Repeated& values) {
  for (float v : values) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

template <typename Repeated>
std::vector<std::string> Strings(const Repeated& values) {
  return std::vector<std::string>(values.begin(), values.end());
}

}  // namespace

StreamDecoder::Result StreamDecoder::Reject(std::string why) {
  ++rejected_;
  last_error_ = std::move(why);
  return Result::kRejected;
}

void StreamDecoder::Reset() {
  layouts_.clear();
  latest_layout_ = SubjectLayout();
  latest_sample_ = FaceSample();
}

const SubjectLayout* StreamDecoder::FindLayout(const std::string& subject) const {
  auto it = layouts_.find(subject);
  return it == layouts_.end() ? nullptr : &it->second;
}

StreamDecoder::Result StreamDecoder::DecodeBytes(const uint8_t* data, size_t size) {
  v1::SubscribeResponse message;
  if (data == nullptr || size > static_cast<size_t>(INT32_MAX) ||
      !message.ParseFromArray(data, static_cast<int>(size))) {
    return Reject("bytes are not a facebridge.v1.SubscribeResponse");
  }
  return Decode(message);
}

StreamDecoder::Result StreamDecoder::Decode(const v1::SubscribeResponse& message) {
  if (message.has_header()) {
    const v1::StreamHeader& h = message.header();
    if (h.subject().empty()) return Reject("header without a subject name");
    if (h.curve_names_size() == 0) return Reject("header for '" + h.subject() + "' names no curves");
    SubjectLayout layout;
    layout.subject = h.subject();
    layout.layout_id = h.layout_id();
    layout.curve_names = Strings(h.curve_names());
    layout.emotion_names = Strings(h.emotion_names());
    layout.viseme_names = Strings(h.viseme_names());
    layout.model_id = h.parameters().model_id();
    for (const auto& block : h.parameters().blocks()) layout.parameter_blocks.emplace_back(block.name(), block.size());
    layout.model_versions = std::map<std::string, std::string>(h.model_versions().begin(), h.model_versions().end());
    layout.frame_rate = h.frame_rate();
    layouts_[layout.subject] = layout;
    latest_layout_ = std::move(layout);
    return Result::kLayout;
  }
  if (!message.has_frame()) return Reject("message carries neither a header nor a frame");

  const v1::Frame& f = message.frame();
  const SubjectLayout* layout = FindLayout(f.subject());
  if (layout == nullptr) return Reject("frame for '" + f.subject() + "' before its header");
  if (f.layout_id() != layout->layout_id) {
    return Reject("frame follows layout " + std::to_string(f.layout_id()) + " but the header in effect is " +
                  std::to_string(layout->layout_id));
  }
  if (static_cast<size_t>(f.curves_size()) != layout->curve_names.size()) {
    return Reject("frame has " + std::to_string(f.curves_size()) + " curves, header names " +
                  std::to_string(layout->curve_names.size()));
  }
  if (f.emotions_size() != 0 && static_cast<size_t>(f.emotions_size()) != layout->emotion_names.size()) {
    return Reject("frame emotions do not match the header");
  }
  if (f.visemes_size() != 0 && static_cast<size_t>(f.visemes_size()) != layout->viseme_names.size()) {
    return Reject("frame visemes do not match the header");
  }
  if (static_cast<size_t>(f.parameters_size()) != layout->ParameterCount()) {
    return Reject("frame parameters do not match the header's parameter layout");
  }
  if (!AllFinite(f.curves()) || !AllFinite(f.emotions()) || !AllFinite(f.parameters())) {
    return Reject("frame holds NaN or infinite values");
  }

  FaceSample s;
  s.subject = f.subject();
  s.layout_id = f.layout_id();
  s.seq = f.seq();
  s.capture_time = f.capture_time();
  s.source_time = f.source_time();
  s.timecode.frame = f.timecode().frame();
  s.timecode.subframe = f.timecode().subframe();
  s.timecode.rate_numerator = f.timecode().rate_numerator() > 0 ? f.timecode().rate_numerator() : 30;
  s.timecode.rate_denominator = f.timecode().rate_denominator() > 0 ? f.timecode().rate_denominator() : 1;
  s.face_found = f.face_found();
  s.curves.assign(f.curves().begin(), f.curves().end());
  s.head_yaw_deg = f.head().yaw_deg();
  s.head_pitch_deg = f.head().pitch_deg();
  s.head_roll_deg = f.head().roll_deg();
  s.head_translation_cm[0] = f.head().translation_cm().x();
  s.head_translation_cm[1] = f.head().translation_cm().y();
  s.head_translation_cm[2] = f.head().translation_cm().z();
  s.eye_left = {f.eye_left().yaw_deg(), f.eye_left().pitch_deg()};
  s.eye_right = {f.eye_right().yaw_deg(), f.eye_right().pitch_deg()};
  s.emotions.assign(f.emotions().begin(), f.emotions().end());
  s.visemes.assign(f.visemes().begin(), f.visemes().end());
  s.parameters.assign(f.parameters().begin(), f.parameters().end());
  s.confidence = f.confidence();
  s.dropped_frames = f.dropped_frames();
  latest_sample_ = std::move(s);
  ++frames_;
  return Result::kFrame;
}

}  // namespace facebridge
