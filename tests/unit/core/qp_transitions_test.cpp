#include <rdmakit/detail/qp_transitions.hpp>

#include <doctest/doctest.h>

using namespace rdmakit;
using detail::rule_for;
using m = qp_attr_mask;
using s = qp_state;

TEST_CASE("legal and illegal transitions") {
  for (auto t : {qp_type::rc, qp_type::uc, qp_type::ud}) {
    CAPTURE(to_string(t));
    CHECK(rule_for(s::rts, s::reset, t).legal);
    CHECK(rule_for(s::reset, s::reset, t).legal);
    CHECK_FALSE(rule_for(s::reset, s::err, t).legal);  // RESET→ERR is not legal
    CHECK(rule_for(s::init, s::err, t).legal);
    CHECK_FALSE(rule_for(s::reset, s::rtr, t).legal);  // no skipping
    CHECK_FALSE(rule_for(s::init, s::rts, t).legal);
    CHECK_FALSE(rule_for(s::err, s::rts, t).legal);
    CHECK(rule_for(s::rts, s::sqd, t).optional == m::en_sqd_async_notify);
  }
  CHECK_FALSE(rule_for(s::sqe, s::rts, qp_type::rc).legal);  // RC has no SQE
  // SQD→SQD is legal, attributes optional (the kernel's ib_modify_qp_is_ok, every device).
  CHECK(rule_for(s::sqd, s::sqd, qp_type::ud).legal);
  CHECK(rule_for(s::sqd, s::sqd, qp_type::ud).optional == (m::pkey_index | m::qkey));
  CHECK(rule_for(s::sqd, s::sqd, qp_type::uc).required == m::none);
  CHECK(rule_for(s::sqd, s::sqd, qp_type::uc).optional ==
        (m::av | m::alt_path | m::access_flags | m::pkey_index | m::path_mig_state));
  CHECK(has_all(rule_for(s::sqd, s::sqd, qp_type::rc).optional,
                m::port | m::timeout | m::retry_cnt | m::rnr_retry | m::min_rnr_timer | m::max_dest_rd_atomic));
  CHECK_FALSE(has_any(rule_for(s::sqd, s::sqd, qp_type::rc).optional, m::cur_state | m::sq_psn));
  CHECK(rule_for(s::sqe, s::rts, qp_type::uc).optional == (m::cur_state | m::access_flags));
  CHECK(rule_for(s::sqe, s::rts, qp_type::ud).optional == (m::cur_state | m::qkey));
}

TEST_CASE("required and optional attributes per transport") {
  CHECK(rule_for(s::reset, s::init, qp_type::rc).required == (m::pkey_index | m::port | m::access_flags));
  CHECK(rule_for(s::reset, s::init, qp_type::ud).required == (m::pkey_index | m::port | m::qkey));
  CHECK(rule_for(s::init, s::rtr, qp_type::rc).required ==
        (m::av | m::path_mtu | m::dest_qpn | m::rq_psn | m::max_dest_rd_atomic | m::min_rnr_timer));
  CHECK(rule_for(s::init, s::rtr, qp_type::uc).required == (m::av | m::path_mtu | m::dest_qpn | m::rq_psn));
  CHECK(rule_for(s::init, s::rtr, qp_type::ud).required == m::none);
  CHECK(rule_for(s::init, s::rtr, qp_type::ud).optional == (m::pkey_index | m::qkey));
  CHECK(rule_for(s::rtr, s::rts, qp_type::rc).required ==
        (m::timeout | m::retry_cnt | m::rnr_retry | m::sq_psn | m::max_qp_rd_atomic));
  CHECK(rule_for(s::rtr, s::rts, qp_type::uc).required == m::sq_psn);
  CHECK(has_all(rule_for(s::rtr, s::rts, qp_type::rc).optional, m::min_rnr_timer));
  CHECK_FALSE(has_any(rule_for(s::rtr, s::rts, qp_type::uc).optional, m::min_rnr_timer));
  CHECK(rule_for(s::rts, s::rts, qp_type::rc).optional == rule_for(s::rtr, s::rts, qp_type::rc).optional);
  // ACCESS_FLAGS is never allowed on UD.
  for (auto from : {s::reset, s::init, s::rtr, s::rts, s::sqd, s::sqe})
    for (auto to : {s::init, s::rtr, s::rts})
      CHECK_FALSE(has_any(rule_for(from, to, qp_type::ud).required | rule_for(from, to, qp_type::ud).optional,
                          m::access_flags));
}
