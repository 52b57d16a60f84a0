// StreamClient against a real bridge. The live tests need a running FaceBridge gRPC server:
//   facebridge run --source sample --grpc 127.0.0.1:50051 [--grpc-token T]
//   FACEBRIDGE_TEST_ADDRESS=127.0.0.1:50051 [FACEBRIDGE_TEST_TOKEN=T] ctest --output-on-failure
// (tests/e2e/test_unreal_core.py does exactly this). Run them against a bridge on --source sample: its Calibrate
// applies to that run only, so CalibrateThroughTheBridge never overwrites anyone's stored profile.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "facebridge/livelink_mapping.h"
#include "facebridge/stream_client.h"

using namespace facebridge;
using namespace std::chrono_literals;

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

ClientSettings LiveSettings() {
  ClientSettings s;
  s.address = Env("FACEBRIDGE_TEST_ADDRESS");
  s.token = Env("FACEBRIDGE_TEST_TOKEN");
  return s;
}

#define REQUIRE_LIVE_BRIDGE()                                                                       \
  if (Env("FACEBRIDGE_TEST_ADDRESS").empty())                                                       \
  GTEST_SKIP() << "no running bridge: set FACEBRIDGE_TEST_ADDRESS (tests/test_unreal_core.py does)"

}  // namespace

TEST(StreamClientOffline, UnreachableBridgeBacksOffAndStopsPromptly) {
  ClientSettings s;
  s.address = "127.0.0.1:1";  // nothing listens on port 1
  s.connect_timeout_s = 0.2;
  s.backoff_initial_s = 0.05;
  StreamClient client(s);
  client.Start();
  EXPECT_TRUE(WaitFor([&] { return client.Reconnects() >= 2; }, 5000ms)) << client.StatusText();
  EXPECT_FALSE(client.Connected());
  const auto t0 = std::chrono::steady_clock::now();
  client.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  EXPECT_EQ(client.StatusText(), "Stopped");
  std::string error;
  ServerStatus status;
  EXPECT_FALSE(client.GetStatus(&status, &error, 0.5));
  EXPECT_FALSE(error.empty());
}

TEST(StreamClientLive, ReceivesHeaderThenFrames) {
  REQUIRE_LIVE_BRIDGE();
  StreamClient client(LiveSettings());
  std::mutex m;
  SubjectLayout layout;
  FaceSample sample;
  std::atomic<int> layouts{0}, frames_before_layout{0}, frames{0};
  client.OnLayout([&](const SubjectLayout& l) {
    std::lock_guard<std::mutex> lock(m);
    layout = l;
    ++layouts;
  });
  client.OnFrame([&](const SubjectLayout& l, const FaceSample& s) {
    std::lock_guard<std::mutex> lock(m);
    if (layouts == 0) ++frames_before_layout;
    EXPECT_EQ(l.layout_id, s.layout_id);
    sample = s;
    ++frames;
  });
  client.Start();
  ASSERT_TRUE(WaitFor([&] { return frames >= 15; }, 30000ms)) << client.StatusText();
  client.Stop();
  std::lock_guard<std::mutex> lock(m);
  EXPECT_GE(layouts, 1);
  EXPECT_EQ(frames_before_layout, 0);
  ASSERT_EQ(layout.curve_names.size(), 52u);
  EXPECT_EQ(layout.curve_names.front(), "eyeBlinkLeft");
  EXPECT_EQ(layout.curve_names.back(), "tongueOut");
  EXPECT_GT(layout.frame_rate, 0.0);
  EXPECT_EQ(sample.curves.size(), 52u);
  EXPECT_GT(sample.capture_time, 1.6e9);
  EXPECT_GT(sample.timecode.rate_numerator, 0);
  EXPECT_EQ(PropertyValues(layout, sample).size(), PropertyNames(layout).size());
  EXPECT_EQ(client.Rejected(), 0u);
}

TEST(StreamClientLive, UnaryCalls) {
  REQUIRE_LIVE_BRIDGE();
  StreamClient client(LiveSettings());
  ServerStatus status;
  std::string error;
  ASSERT_TRUE(client.GetStatus(&status, &error, 5.0)) << error;
  EXPECT_FALSE(status.server_version.empty());
  std::vector<std::string> subjects;
  ASSERT_TRUE(WaitFor([&] { return client.ListSubjects(&subjects, &error, 5.0) && !subjects.empty(); }, 20000ms))
      << error;
}

TEST(StreamClientLive, WrongTokenIsRefusedAndReported) {
  REQUIRE_LIVE_BRIDGE();
  if (Env("FACEBRIDGE_TEST_TOKEN").empty()) GTEST_SKIP() << "bridge runs without a token";
  ClientSettings s = LiveSettings();
  s.token = "not-the-token";
  s.backoff_initial_s = 0.05;
  StreamClient client(s);
  client.Start();
  EXPECT_TRUE(WaitFor([&] { return client.StatusText().find("UNAUTHENTICATED") != std::string::npos; }, 10000ms))
      << client.StatusText();
  client.Stop();
  EXPECT_EQ(client.FramesReceived(), 0u);
  std::string error;
  ServerStatus status;
  EXPECT_FALSE(client.GetStatus(&status, &error, 5.0));
  EXPECT_NE(error.find("UNAUTHENTICATED"), std::string::npos);
}

TEST(StreamClientLive, StopAndStartAgainManyTimes) {
  REQUIRE_LIVE_BRIDGE();
  for (int i = 0; i < 20; ++i) {
    StreamClient client(LiveSettings());
    std::atomic<int> frames{0};
    client.OnFrame([&](const SubjectLayout&, const FaceSample&) { ++frames; });
    client.Start();
    ASSERT_TRUE(WaitFor([&] { return frames >= 1; }, 20000ms)) << client.StatusText();
    client.Stop();
  }
}

TEST(StreamClientLive, CalibrateThroughTheBridge) {
  REQUIRE_LIVE_BRIDGE();
  StreamClient client(LiveSettings());
  std::vector<std::string> subjects;
  std::string error;
  ASSERT_TRUE(WaitFor([&] { return client.ListSubjects(&subjects, &error, 5.0) && !subjects.empty(); }, 20000ms))
      << error;
  std::string message;
  EXPECT_TRUE(client.Calibrate(subjects.front(), &message, 30.0)) << message;
  EXPECT_FALSE(client.Calibrate("no-such-subject", &message, 10.0));
  EXPECT_FALSE(message.empty());
}
