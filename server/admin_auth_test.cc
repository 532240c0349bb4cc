#include "server/admin_auth.h"

#include "gtest/gtest.h"

namespace expertd::server {
namespace {

TEST(ConstantTimeEqualsTest, Basics) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  // A prefix padded with NULs must not compare equal.
  EXPECT_FALSE(ConstantTimeEquals(absl::string_view("ab\0", 3), "ab"));
}

TEST(CheckAdminTokenTest, Codes) {
  const std::string token = "0123456789abcdef";
  absl::string_view good = "Bearer 0123456789abcdef";
  absl::string_view lower = "bearer 0123456789abcdef";
  absl::string_view wrong = "Bearer 0123456789abcdeX";
  absl::string_view basic = "Basic dXNlcjpwYXNz";
  absl::string_view empty = "Bearer ";
  EXPECT_TRUE(CheckAdminToken(token, &good).ok());
  EXPECT_TRUE(CheckAdminToken(token, &lower).ok());
  EXPECT_EQ(CheckAdminToken(token, nullptr).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckAdminToken(token, &basic).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckAdminToken(token, &wrong).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckAdminToken(token, &empty).code(), absl::StatusCode::kUnauthenticated);
  absl::Status disabled = CheckAdminToken("", &good);
  EXPECT_EQ(disabled.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(disabled.message().find("disabled"), std::string::npos);
}

}  // namespace
}  // namespace expertd::server
