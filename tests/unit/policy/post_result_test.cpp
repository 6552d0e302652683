#include "fixture.hpp"

using namespace policy_test;

TEST_CASE("post_result: ok, explicit bool, and a sentence for every status") {
  post_result ok{};
  CHECK(ok.ok());
  CHECK(static_cast<bool>(ok));
  post_result full{post_status::sq_full, 0, 0};
  CHECK_FALSE(full.ok());
  CHECK(std::string(full.message()).find("poll the completion queue") != std::string::npos);
  CHECK(std::string(to_string(post_status::sq_full)) == "sq_full");
  for (auto s : {post_status::rq_full, post_status::qp_error, post_status::recv_too_small})
    CHECK(std::string(post_result{s, 0, 0}.message()).size() > 20);
  CHECK(std::string(post_result{post_status::backend_error, EINVAL, 2}.message()).find("EINVAL") !=
        std::string::npos);
  static_assert(!std::is_convertible_v<post_result, bool>, "statuses must not silently become bools");
}
