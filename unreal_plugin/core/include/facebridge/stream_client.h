// A facebridge.v1 subscriber that runs on its own thread: connects, decodes, calls back, and reconnects with
// backoff when the bridge goes away. Plain C++17; the Unreal source wraps it and owns nothing else.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "facebridge/types.h"

namespace grpc {
class ClientContext;
}

namespace facebridge {

struct ClientSettings {
  std::string address = "127.0.0.1:50051";
  std::string token;                 // sent as "authorization: Bearer <token>" when not empty
  std::string tls_root_cert_pem;     // use TLS when not empty (PEM of the server's CA or self-signed cert)
  std::vector<std::string> subjects; // empty: all
  double max_frame_rate = 0.0;       // 0: every frame
  double connect_timeout_s = 5.0;
  double backoff_initial_s = 0.5;
  double backoff_max_s = 8.0;
};

struct ServerStatus {
  std::vector<std::string> sources, backends, subjects;
  double fps = 0.0, latency_ms_p50 = 0.0, latency_ms_p99 = 0.0;
  uint32_t subscribers = 0;
  std::string server_version;
};

class StreamClient {
 public:
  using LayoutCallback = std::function<void(const SubjectLayout&)>;
  using FrameCallback = std::function<void(const SubjectLayout&, const FaceSample&)>;

  explicit StreamClient(ClientSettings settings);
  ~StreamClient();  // stops
  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;

  // Callbacks run on the client's thread; keep them short (copy and hand over).
  void OnLayout(LayoutCallback cb) { on_layout_ = std::move(cb); }
  void OnFrame(FrameCallback cb) { on_frame_ = std::move(cb); }

  void Start();
  // Cancels the stream and joins the thread; returns within about a second.
  void Stop();

  // Human-readable state for the Live Link panel: "Connecting to ...", "Streaming 1 subject at 30.0 fps", ...
  std::string StatusText() const;
  bool Connected() const { return connected_.load(); }
  uint64_t FramesReceived() const { return frames_.load(); }
  uint64_t Reconnects() const { return reconnects_.load(); }
  uint64_t Rejected() const { return rejected_.load(); }

  // Unary calls (blocking, with a deadline); false and `error` set on failure.
  bool GetStatus(ServerStatus* out, std::string* error, double timeout_s = 2.0);
  bool Calibrate(const std::string& subject, std::string* message, double timeout_s = 5.0);
  bool ListSubjects(std::vector<std::string>* out, std::string* error, double timeout_s = 2.0);

 private:
  struct Impl;
  void Run();
  void SetStatus(std::string text);

  ClientSettings settings_;
  std::unique_ptr<Impl> impl_;
  LayoutCallback on_layout_;
  FrameCallback on_frame_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> frames_{0}, reconnects_{0}, rejected_{0};
  mutable std::mutex mutex_;  // guards status_, context_
  std::condition_variable wake_;
  std::string status_;
  grpc::ClientContext* context_ = nullptr;
};

}  // namespace facebridge
