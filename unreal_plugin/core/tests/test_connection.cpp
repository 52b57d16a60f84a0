#include <gtest/gtest.h>

#include "facebridge/connection.h"

using namespace facebridge;

TEST(ConnectionString, ParsesAllKeysAndIgnoresUnknownOnes) {
  ClientSettings s;
  std::string error;
  ASSERT_TRUE(ParseConnectionString(" address=10.0.0.5:6000 ; subjects=Anna, Ben ;token=abc;max_fps=60;future=1", &s,
                                    &error))
      << error;
  EXPECT_EQ(s.address, "10.0.0.5:6000");
  ASSERT_EQ(s.subjects.size(), 2u);
  EXPECT_EQ(s.subjects[1], "Ben");
  EXPECT_EQ(s.token, "abc");
  EXPECT_DOUBLE_EQ(s.max_frame_rate, 60.0);
}

TEST(ConnectionString, EmptyKeepsDefaults) {
  ClientSettings s;
  std::string error;
  ASSERT_TRUE(ParseConnectionString("", &s, &error));
  EXPECT_EQ(s.address, "127.0.0.1:50051");
}

TEST(ConnectionString, RejectsBadValuesWithoutChangingSettings) {
  ClientSettings s;
  std::string error;
  EXPECT_FALSE(ParseConnectionString("address=nohost", &s, &error));
  EXPECT_NE(error.find("HOST:PORT"), std::string::npos);
  EXPECT_FALSE(ParseConnectionString("address=h:99999", &s, &error));
  EXPECT_FALSE(ParseConnectionString("max_fps=fast", &s, &error));
  EXPECT_FALSE(ParseConnectionString("justtext", &s, &error));
  EXPECT_EQ(s.address, "127.0.0.1:50051");
}

TEST(ConnectionString, FormatRoundTrips) {
  ClientSettings s;
  s.address = "[::1]:50051";
  s.subjects = {"Anna", "Ben"};
  s.token = "t0k";
  s.max_frame_rate = 30;
  ClientSettings back;
  std::string error;
  ASSERT_TRUE(ParseConnectionString(FormatConnectionString(s), &back, &error)) << error;
  EXPECT_EQ(back.address, s.address);
  EXPECT_EQ(back.subjects, s.subjects);
  EXPECT_EQ(back.token, s.token);
  EXPECT_DOUBLE_EQ(back.max_frame_rate, 30.0);
}
