// Reconnect delays: exponential with a cap and jitter, reset after a stream that worked.
#pragma once

#include <cstdint>

namespace facebridge {

class Backoff {
 public:
  Backoff(double initial_s = 0.5, double max_s = 8.0, double multiplier = 2.0, double jitter = 0.2,
          uint32_t seed = 1u);
  // Seconds to wait before the next attempt; grows each call up to max_s (+-jitter).
  double Next();
  void Reset();
  uint32_t Attempts() const { return attempts_; }

 private:
  double initial_s_, max_s_, multiplier_, jitter_, current_s_;
  uint32_t attempts_ = 0;
  uint32_t rng_;
};

}  // namespace facebridge
