#include "fixture.hpp"

using namespace coro_test;

TEST_CASE("wr_result: each outcome says what happened") {
  const wr_result<B> refused(post_result{post_status::qp_error, 0, 0});
  CHECK(refused.outcome() == wr_outcome::not_posted);
  CHECK_FALSE(refused.ok());
  CHECK_FALSE(static_cast<bool>(refused));
  CHECK(refused.status() == wc_status::general_err);
  CHECK(refused.post().status == post_status::qp_error);
  CHECK(refused.message().find("queue pair in ERR") != std::string::npos);
  CHECK_THROWS_WITH_AS((void)refused.completion(), doctest::Contains("did not complete (not posted)"), usage_error);

  const wr_result<B> cancelled(wr_outcome::cancelled);
  CHECK(cancelled.status() == wc_status::wr_flush_err);
  CHECK(cancelled.message() == "cancelled");
  const wr_result<B> late(wr_outcome::timed_out);
  CHECK(late.status() == wc_status::general_err);
  CHECK(std::string(to_string(wr_outcome::timed_out)) == "timed out");
}
