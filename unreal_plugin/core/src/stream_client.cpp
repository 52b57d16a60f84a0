#include "facebridge/stream_client.h"

#include <chrono>
#include <cstdio>

#include <grpcpp/grpcpp.h>

#include "facebridge/backoff.h"
#include "facebridge/decoder.h"
#include "facebridge/v1/facebridge.grpc.pb.h"

namespace facebridge {

struct StreamClient::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::FaceBridgeService::Stub> stub;
};

namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    default: return "ERROR";
  }
}

std::string Describe(const grpc::Status& status) {
  return std::string(CodeName(status.error_code())) + ": " + status.error_message();
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

}  // namespace

StreamClient::StreamClient(ClientSettings settings) : settings_(std::move(settings)), impl_(new Impl) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);  // notice a vanished bridge even when no frames flow
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(settings_.backoff_max_s * 1000));
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!settings_.tls_root_cert_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = settings_.tls_root_cert_pem;
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  impl_->channel = grpc::CreateCustomChannel(settings_.address, creds, args);
  impl_->stub = v1::FaceBridgeService::NewStub(impl_->channel);
  status_ = "Not started";
}

StreamClient::~StreamClient() { Stop(); }

void StreamClient::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void StreamClient::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string StreamClient::StatusText() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

void StreamClient::SetStatus(std::string text) {
  std::lock_guard<std::mutex> lock(mutex_);
  status_ = std::move(text);
}

static void Authorize(grpc::ClientContext* ctx, const ClientSettings& settings) {
  if (!settings.token.empty()) ctx->AddMetadata("authorization", "Bearer " + settings.token);
}

static void SetDeadline(grpc::ClientContext* ctx, double seconds) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)));
}

// One unary call with the bearer token and a deadline; on failure `error` (if given) says what went wrong.
template <typename Invoke>
static bool CallUnary(const ClientSettings& settings, double timeout_s, std::string* error, Invoke invoke) {
  grpc::ClientContext ctx;
  Authorize(&ctx, settings);
  SetDeadline(&ctx, timeout_s);
  const grpc::Status status = invoke(&ctx);
  if (!status.ok() && error) *error = Describe(status);
  return status.ok();
}

void StreamClient::Run() {
  Backoff backoff(settings_.backoff_initial_s, settings_.backoff_max_s);
  v1::SubscribeRequest request;
  for (const auto& s : settings_.subjects) request.add_subjects(s);
  request.set_max_frame_rate(settings_.max_frame_rate);

  while (!stop_) {
    SetStatus("Connecting to " + settings_.address);
    grpc::ClientContext ctx;
    Authorize(&ctx, settings_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) break;
      context_ = &ctx;
    }
    // Wait for the channel (bounded), so that a bridge that starts a moment later is picked up.
    // In short slices so that Stop() is never held up by a bridge that is not there.
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(settings_.connect_timeout_s * 1000));
    while (!stop_ && std::chrono::steady_clock::now() < give_up &&
           !impl_->channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::milliseconds(200))) {
    }
    std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader = impl_->stub->Subscribe(&ctx, request);
    StreamDecoder decoder;
    v1::SubscribeResponse message;
    auto window_start = std::chrono::steady_clock::now();
    uint64_t window_frames = 0;
    while (reader->Read(&message)) {
      if (!connected_) {
        connected_ = true;
        backoff.Reset();
        SetStatus("Connected to " + settings_.address);
      }
      switch (decoder.Decode(message)) {
        case StreamDecoder::Result::kLayout:
          if (on_layout_) on_layout_(decoder.LatestLayout());
          break;
        case StreamDecoder::Result::kFrame: {
          ++frames_;
          ++window_frames;
          const FaceSample& sample = decoder.LatestSample();
          if (on_frame_) on_frame_(*decoder.FindLayout(sample.subject), sample);
          break;
        }
        case StreamDecoder::Result::kRejected:
          ++rejected_;
          break;
      }
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - window_start).count();
      if (elapsed >= 1.0) {
        SetStatus("Streaming from " + settings_.address + " at " + Seconds(window_frames / elapsed) +
                  " fps (" + std::to_string(decoder.LatestSample().dropped_frames) + " dropped)");
        window_start = now;
        window_frames = 0;
      }
    }
    const grpc::Status status = reader->Finish();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      context_ = nullptr;
    }
    connected_ = false;
    if (stop_) break;
    const double delay = backoff.Next();
    ++reconnects_;
    SetStatus("Reconnecting in " + Seconds(delay) + " s (" + Describe(status) + ")");
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, std::chrono::milliseconds(static_cast<int64_t>(delay * 1000)), [this] { return stop_.load(); });
  }
  SetStatus("Stopped");
}

bool StreamClient::GetStatus(ServerStatus* out, std::string* error, double timeout_s) {
  v1::GetStatusResponse reply;
  if (!CallUnary(settings_, timeout_s, error, [&](grpc::ClientContext* ctx) {
        return impl_->stub->GetStatus(ctx, v1::GetStatusRequest(), &reply);
      })) {
    return false;
  }
  out->sources.assign(reply.sources().begin(), reply.sources().end());
  out->backends.assign(reply.backends().begin(), reply.backends().end());
  out->subjects.assign(reply.subjects().begin(), reply.subjects().end());
  out->fps = reply.fps();
  out->latency_ms_p50 = reply.latency_ms_p50();
  out->latency_ms_p99 = reply.latency_ms_p99();
  out->subscribers = reply.subscribers();
  out->server_version = reply.server_version();
  return true;
}

bool StreamClient::Calibrate(const std::string& subject, std::string* message, double timeout_s) {
  v1::CalibrateRequest request;
  request.set_subject(subject);
  v1::CalibrateResponse reply;
  if (!CallUnary(settings_, timeout_s, message, [&](grpc::ClientContext* ctx) {
        return impl_->stub->Calibrate(ctx, request, &reply);
      })) {
    return false;
  }
  if (message) *message = reply.message();
  return reply.ok();
}

bool StreamClient::ListSubjects(std::vector<std::string>* out, std::string* error, double timeout_s) {
  v1::ListSubjectsResponse reply;
  if (!CallUnary(settings_, timeout_s, error, [&](grpc::ClientContext* ctx) {
        return impl_->stub->ListSubjects(ctx, v1::ListSubjectsRequest(), &reply);
      })) {
    return false;
  }
  out->assign(reply.subjects().begin(), reply.subjects().end());
  return true;
}

}  // namespace facebridge
