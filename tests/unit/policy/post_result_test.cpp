#include "fixture.hpp"

#include <set>

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

TEST_CASE("every post_status and post_rule has a name, and every status a sentence of its own") {
  std::set<std::string> names, sentences;
  for (int i = 0; i <= static_cast<int>(post_status::no_completion_due); ++i) {
    const auto s = static_cast<post_status>(i);
    CAPTURE(i);
    CHECK(std::string(to_string(s)) != "unknown");
    names.insert(to_string(s));
    if (s != post_status::backend_error) sentences.insert(post_result{s, 0, 0}.message());
  }
  CHECK(names.size() == static_cast<std::size_t>(post_status::no_completion_due) + 1);
  CHECK(sentences.size() == static_cast<std::size_t>(post_status::no_completion_due));
  std::set<std::string> rules;
  for (int i = 0; i <= static_cast<int>(post_rule::ud_mtu); ++i) rules.insert(to_string(static_cast<post_rule>(i)));
  CHECK(rules.size() == static_cast<std::size_t>(post_rule::ud_mtu) + 1);
  CHECK(std::string(to_string(post_rule::inline_size)) == "inline_size");
}
