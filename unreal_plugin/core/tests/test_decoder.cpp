#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "facebridge/decoder.h"
#include "facebridge/v1/facebridge.pb.h"

using facebridge::StreamDecoder;
using Result = facebridge::StreamDecoder::Result;
namespace v1 = facebridge::v1;

namespace {

v1::SubscribeResponse Header(const std::string& subject, uint32_t layout_id, int curves = 52) {
  v1::SubscribeResponse m;
  auto* h = m.mutable_header();
  h->set_subject(subject);
  h->set_layout_id(layout_id);
  for (int i = 0; i < curves; ++i) h->add_curve_names(i == 0 ? "eyeBlinkLeft" : "curve" + std::to_string(i));
  for (const char* e : {"angry", "disgust", "fear", "happy", "sad", "surprise", "neutral"}) h->add_emotion_names(e);
  h->mutable_parameters()->set_model_id("ict-face-light");
  auto* b = h->mutable_parameters()->add_blocks();
  b->set_name("expression");
  b->set_size(4);
  (*h->mutable_model_versions())["expression"] = "1";
  h->set_frame_rate(30.0);
  return m;
}

v1::SubscribeResponse FrameMsg(const std::string& subject, uint32_t layout_id, uint64_t seq, int curves = 52) {
  v1::SubscribeResponse m;
  auto* f = m.mutable_frame();
  f->set_subject(subject);
  f->set_layout_id(layout_id);
  f->set_seq(seq);
  f->set_capture_time(1.7e9 + seq / 30.0);
  f->set_source_time(100.0 + seq / 30.0);
  f->mutable_timecode()->set_frame(1000 + static_cast<int32_t>(seq));
  f->mutable_timecode()->set_rate_numerator(30);
  f->mutable_timecode()->set_rate_denominator(1);
  f->set_face_found(true);
  for (int i = 0; i < curves; ++i) f->add_curves(i / 100.0f);
  for (int i = 0; i < 7; ++i) f->add_emotions(i == 3 ? 0.9f : 0.0f);
  for (int i = 0; i < 4; ++i) f->add_parameters(0.5f);
  f->mutable_head()->set_yaw_deg(12.0f);
  f->set_confidence(0.8f);
  f->set_dropped_frames(3);
  return m;
}

}  // namespace

TEST(StreamDecoder, HeaderThenFrames) {
  StreamDecoder d;
  ASSERT_EQ(d.Decode(Header("Anna", 1)), Result::kLayout);
  EXPECT_EQ(d.LatestLayout().subject, "Anna");
  EXPECT_EQ(d.LatestLayout().curve_names.size(), 52u);
  EXPECT_EQ(d.LatestLayout().ParameterCount(), 4u);
  EXPECT_EQ(d.LatestLayout().model_versions.at("expression"), "1");
  ASSERT_EQ(d.Decode(FrameMsg("Anna", 1, 5)), Result::kFrame);
  const auto& s = d.LatestSample();
  EXPECT_EQ(s.seq, 5u);
  EXPECT_EQ(s.curves.size(), 52u);
  EXPECT_FLOAT_EQ(s.curves[10], 0.1f);
  EXPECT_FLOAT_EQ(s.head_yaw_deg, 12.0f);
  EXPECT_EQ(s.timecode.frame, 1005);
  EXPECT_EQ(s.dropped_frames, 3u);
  EXPECT_EQ(d.Frames(), 1u);
  EXPECT_EQ(d.Rejected(), 0u);
}

TEST(StreamDecoder, FrameBeforeHeaderIsRejected) {
  StreamDecoder d;
  EXPECT_EQ(d.Decode(FrameMsg("Anna", 1, 0)), Result::kRejected);
  EXPECT_NE(d.LastError().find("before its header"), std::string::npos);
}

TEST(StreamDecoder, FrameMustFollowTheHeaderInEffect) {
  StreamDecoder d;
  d.Decode(Header("Anna", 1));
  EXPECT_EQ(d.Decode(FrameMsg("Anna", 2, 0)), Result::kRejected);
  EXPECT_EQ(d.Decode(FrameMsg("Anna", 1, 0, 51)), Result::kRejected);  // one curve short
  EXPECT_EQ(d.Decode(Header("Anna", 2, 53)), Result::kLayout);       // layout changes: new header
  EXPECT_EQ(d.Decode(FrameMsg("Anna", 2, 1, 53)), Result::kFrame);
  EXPECT_EQ(d.Decode(FrameMsg("Anna", 1, 2)), Result::kRejected);    // stale layout
  EXPECT_EQ(d.Rejected(), 3u);
}

TEST(StreamDecoder, SeveralSubjectsKeepTheirOwnLayouts) {
  StreamDecoder d;
  d.Decode(Header("Anna", 1));
  d.Decode(Header("Ben", 2, 10));
  EXPECT_EQ(d.Decode(FrameMsg("Anna", 1, 0)), Result::kFrame);
  EXPECT_EQ(d.Decode(FrameMsg("Ben", 2, 0, 10)), Result::kFrame);
  ASSERT_NE(d.FindLayout("Ben"), nullptr);
  EXPECT_EQ(d.FindLayout("Ben")->curve_names.size(), 10u);
  EXPECT_EQ(d.FindLayout("Nobody"), nullptr);
}

TEST(StreamDecoder, RejectsNonFiniteValuesAndEmptyMessages) {
  StreamDecoder d;
  d.Decode(Header("Anna", 1));
  auto bad = FrameMsg("Anna", 1, 0);
  bad.mutable_frame()->set_curves(4, std::nanf(""));
  EXPECT_EQ(d.Decode(bad), Result::kRejected);
  EXPECT_EQ(d.Decode(v1::SubscribeResponse()), Result::kRejected);
  v1::SubscribeResponse nameless = Header("", 3);
  EXPECT_EQ(d.Decode(nameless), Result::kRejected);
}

TEST(StreamDecoder, BytesRoundTrip) {
  StreamDecoder d;
  const std::string header = Header("Anna", 1).SerializeAsString();
  const std::string frame = FrameMsg("Anna", 1, 9).SerializeAsString();
  EXPECT_EQ(d.DecodeBytes(reinterpret_cast<const uint8_t*>(header.data()), header.size()), Result::kLayout);
  EXPECT_EQ(d.DecodeBytes(reinterpret_cast<const uint8_t*>(frame.data()), frame.size()), Result::kFrame);
  EXPECT_EQ(d.LatestSample().seq, 9u);
  EXPECT_EQ(d.DecodeBytes(nullptr, 0), Result::kRejected);
}

TEST(StreamDecoder, TruncatedAndCorruptedBytesNeverCrash) {
  const std::string header = Header("Anna", 1).SerializeAsString();
  const std::string frame = FrameMsg("Anna", 1, 9).SerializeAsString();
  std::mt19937 rng(1234);
  uint64_t decoded = 0;
  for (int round = 0; round < 3000; ++round) {
    StreamDecoder d;
    d.DecodeBytes(reinterpret_cast<const uint8_t*>(header.data()), header.size());
    std::string bytes = frame;
    if (round % 3 == 0) {
      bytes.resize(rng() % bytes.size());  // truncated
    } else {
      for (int flips = 1 + rng() % 8; flips > 0; --flips) bytes[rng() % bytes.size()] ^= char(1 << (rng() % 8));
    }
    const Result r = d.DecodeBytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (r == Result::kFrame) {
      ++decoded;
      EXPECT_EQ(d.LatestSample().curves.size(), 52u);  // whatever got through still matches its layout
      for (float v : d.LatestSample().curves) EXPECT_TRUE(std::isfinite(v));
    }
  }
  SUCCEED() << decoded << " corrupted frames still decoded consistently";
}
