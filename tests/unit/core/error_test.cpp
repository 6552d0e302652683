#include <rdmakit/error.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace rdmakit;

TEST_CASE("verbs_error carries the verb, the errno and a readable message") {
  verbs_error e("ibv_modify_qp", EINVAL, "INIT->RTR on RC needs AV; call connect() with the peer's endpoint");
  CHECK(e.verb() == "ibv_modify_qp");
  CHECK(e.errno_value() == EINVAL);
  CHECK(e.code() == std::errc::invalid_argument);
  std::string what = e.what();
  CHECK(what.find("ibv_modify_qp") != std::string::npos);
  CHECK(what.find("needs AV") != std::string::npos);
  CHECK(what.find("EINVAL") != std::string::npos);
}

TEST_CASE("verbs_error without detail still names the verb") {
  verbs_error e("ibv_alloc_pd", ENOMEM);
  CHECK(std::string(e.what()).rfind("ibv_alloc_pd", 0) == 0);
  CHECK(e.code() == std::errc::not_enough_memory);
  CHECK(std::string(e.code().category().name()) == "rdmakit.verbs");
}

TEST_CASE("work completion statuses are error codes") {
  std::error_code ec = wc_status::rem_access_err;
  CHECK(ec.message() == "remote access error");
  CHECK(ec.category() == wc_status_category());
  std::error_code ok = wc_status::success;
  CHECK_FALSE(ok);
}
