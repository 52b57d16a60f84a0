#include <gtest/gtest.h>

#include "facebridge/backoff.h"

TEST(Backoff, GrowsToTheCapWithJitterAndResets) {
  facebridge::Backoff b(0.5, 8.0, 2.0, 0.2, 42);
  double previous = 0.0;
  for (int i = 0; i < 4; ++i) {
    const double d = b.Next();
    EXPECT_GT(d, previous * 1.2);  // grows despite +-20% jitter while doubling
    previous = d;
  }
  for (int i = 0; i < 20; ++i) {
    const double d = b.Next();
    EXPECT_LE(d, 8.0 * 1.2 + 1e-9);
    EXPECT_GE(d, 8.0 * 0.8 - 1e-9);
  }
  EXPECT_EQ(b.Attempts(), 24u);
  b.Reset();
  EXPECT_LE(b.Next(), 0.5 * 1.2 + 1e-9);
}
