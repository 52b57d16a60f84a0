// Turns facebridge.v1 stream messages into plain layouts and samples, checking every message against the
// header it claims to follow. One bad message is rejected and counted; it never ends the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "facebridge/types.h"

namespace facebridge {
namespace v1 {
class SubscribeResponse;
}

class StreamDecoder {
 public:
  enum class Result {
    kLayout,    // a new or changed layout: LatestLayout() has it (push static data)
    kFrame,     // LatestSample() has a frame that matches its subject's layout (push frame data)
    kRejected,  // malformed or inconsistent; LastError() says why
  };

  Result Decode(const v1::SubscribeResponse& message);
  // Parses serialized bytes first (used by fuzz tests and by transports that hand over raw buffers).
  Result DecodeBytes(const uint8_t* data, size_t size);

  const SubjectLayout& LatestLayout() const { return latest_layout_; }
  const FaceSample& LatestSample() const { return latest_sample_; }
  const SubjectLayout* FindLayout(const std::string& subject) const;
  const std::string& LastError() const { return last_error_; }
  uint64_t Rejected() const { return rejected_; }
  uint64_t Frames() const { return frames_; }
  // Forget all layouts (after a reconnect the server sends headers again).
  void Reset();

 private:
  Result Reject(std::string why);

  std::map<std::string, SubjectLayout> layouts_;
  SubjectLayout latest_layout_;
  FaceSample latest_sample_;
  std::string last_error_;
  uint64_t rejected_ = 0;
  uint64_t frames_ = 0;
};

}  // namespace facebridge
