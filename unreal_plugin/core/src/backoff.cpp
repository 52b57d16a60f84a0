#include "facebridge/backoff.h"

#include <algorithm>

namespace facebridge {

Backoff::Backoff(double initial_s, double max_s, double multiplier, double jitter, uint32_t seed)
    : initial_s_(initial_s), max_s_(max_s), multiplier_(multiplier), jitter_(jitter), current_s_(initial_s),
      rng_(seed ? seed : 1u) {}

double Backoff::Next() {
  // xorshift32: tiny and deterministic for a given seed (tests), enough to spread reconnecting clients.
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 17;
  rng_ ^= rng_ << 5;
  const double unit = (rng_ & 0xFFFFFF) / double(0xFFFFFF);  // [0, 1]
  const double delay = current_s_ * (1.0 + jitter_ * (2.0 * unit - 1.0));
  current_s_ = std::min(current_s_ * multiplier_, max_s_);
  ++attempts_;
  return std::max(0.0, delay);
}

void Backoff::Reset() {
  current_s_ = initial_s_;
  attempts_ = 0;
}

}  // namespace facebridge
