#pragma once
// The QP transition table of the IB spec (docs/semantics.md#modify-masks): which transitions
// exist and which attributes each requires or allows, per transport. The mock enforces
// it, the ibverbs backend explains failures with it, transport.hpp is checked against it.
#include <rdmakit/types.hpp>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

struct transition_rule {
  bool legal = false;
  qp_attr_mask required = qp_attr_mask::none;
  qp_attr_mask optional = qp_attr_mask::none;
};

constexpr transition_rule rule_for(qp_state from, qp_state to, qp_type type) noexcept {
  using m = qp_attr_mask;
  using s = qp_state;
  const bool ud = type == qp_type::ud;
  const bool rc = type == qp_type::rc;
  const m rts_optional = ud ? (m::cur_state | m::qkey)
                        : rc ? (m::cur_state | m::alt_path | m::access_flags | m::min_rnr_timer |
                                m::path_mig_state)
                             : (m::cur_state | m::alt_path | m::access_flags | m::path_mig_state);
  if (to == s::reset) return {true, m::none, m::none};
  if (to == s::err) return {from != s::reset, m::none, m::none};
  switch (from) {
    case s::reset:
      if (to == s::init)
        return {true, ud ? (m::pkey_index | m::port | m::qkey) : (m::pkey_index | m::port | m::access_flags),
                m::none};
      break;
    case s::init:
      if (to == s::init)
        return {true, m::none, ud ? (m::pkey_index | m::port | m::qkey) : (m::pkey_index | m::port | m::access_flags)};
      if (to == s::rtr) {
        if (ud) return {true, m::none, m::pkey_index | m::qkey};
        const m uc_req = m::av | m::path_mtu | m::dest_qpn | m::rq_psn;
        return {true, rc ? (uc_req | m::max_dest_rd_atomic | m::min_rnr_timer) : uc_req,
                m::alt_path | m::access_flags | m::pkey_index};
      }
      break;
    case s::rtr:
      if (to == s::rts) {
        if (rc)
          return {true, m::timeout | m::retry_cnt | m::rnr_retry | m::sq_psn | m::max_qp_rd_atomic, rts_optional};
        return {true, m::sq_psn, rts_optional};
      }
      break;
    case s::rts:
      if (to == s::rts) return {true, m::none, rts_optional};
      if (to == s::sqd) return {true, m::none, m::en_sqd_async_notify};
      break;
    case s::sqd:
      if (to == s::rts) return {true, m::none, rts_optional};
      // SQD→SQD changes attributes while drained (the IB spec's table, and the
      // kernel's ib_modify_qp_is_ok qp_state_table for every device).
      if (to == s::sqd) {
        if (ud) return {true, m::none, m::pkey_index | m::qkey};
        const m uc_opt = m::av | m::alt_path | m::access_flags | m::pkey_index | m::path_mig_state;
        if (!rc) return {true, m::none, uc_opt};
        return {true, m::none,
                uc_opt | m::port | m::timeout | m::retry_cnt | m::rnr_retry | m::max_qp_rd_atomic |
                    m::max_dest_rd_atomic | m::min_rnr_timer};
      }
      break;
    case s::sqe:
      if (to == s::rts && !rc) return {true, m::none, ud ? (m::cur_state | m::qkey) : (m::cur_state | m::access_flags)};
      break;
    case s::err:
      break;
  }
  return {};
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
