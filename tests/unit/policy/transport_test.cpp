#include "fixture.hpp"

using namespace policy_test;
using m = qp_attr_mask;

TEST_CASE("transport facts follow semantics.md §2 and §7") {
  static_assert(transport<rc> && transport<uc> && transport<ud>);
  CHECK(rc::type == qp_type::rc);
  CHECK(uc::type == qp_type::uc);
  CHECK(ud::type == qp_type::ud);
  CHECK((rc::supports_write && rc::supports_read && rc::supports_atomic && !rc::needs_ah));
  CHECK((uc::supports_write && !uc::supports_read && !uc::supports_atomic && !uc::needs_ah));
  CHECK((!ud::supports_write && !ud::supports_read && !ud::supports_atomic && ud::needs_ah));
  CHECK(rc::recv_offset == 0);
  CHECK(uc::recv_offset == 0);
  CHECK(ud::recv_offset == 40);
  for (auto op : {opcode::send, opcode::send_with_imm}) {
    CHECK(allows<rc>(op));
    CHECK(allows<uc>(op));
    CHECK(allows<ud>(op));
  }
  for (auto op : {opcode::rdma_write, opcode::rdma_write_with_imm}) {
    CHECK(allows<rc>(op));
    CHECK(allows<uc>(op));
    CHECK_FALSE(allows<ud>(op));
  }
  for (auto op : {opcode::rdma_read, opcode::atomic_cmp_and_swp, opcode::atomic_fetch_and_add}) {
    CHECK(allows<rc>(op));
    CHECK_FALSE(allows<uc>(op));
    CHECK_FALSE(allows<ud>(op));
  }
}

TEST_CASE("mask tables are exactly the required attributes of semantics.md §1") {
  CHECK(rc::init_mask == (m::state | m::pkey_index | m::port | m::access_flags));
  CHECK(uc::init_mask == rc::init_mask);
  CHECK(ud::init_mask == (m::state | m::pkey_index | m::port | m::qkey));
  CHECK(rc::rtr_mask == (m::state | m::av | m::path_mtu | m::dest_qpn | m::rq_psn | m::max_dest_rd_atomic |
                         m::min_rnr_timer));
  CHECK(uc::rtr_mask == (m::state | m::av | m::path_mtu | m::dest_qpn | m::rq_psn));
  CHECK(ud::rtr_mask == m::state);
  CHECK(rc::rts_mask == (m::state | m::timeout | m::retry_cnt | m::rnr_retry | m::sq_psn | m::max_qp_rd_atomic));
  CHECK(uc::rts_mask == (m::state | m::sq_psn));
  CHECK(ud::rts_mask == (m::state | m::sq_psn));
}

namespace {
// Drives a raw QP through the three steps with T's masks, first with each required bit
// removed (the mock must refuse), then with the full mask (it must accept).
template <class T>
void masks_against_mock() {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto peer = y.pd.create_qp<T>(y.cq, qp_cap{4, 4});
  qp_cap caps{4, 4};
  auto q = B::create_qp(x.pd.native(), x.cq.native(), x.cq.native(), T::type, caps, false);
  qp_attr init;
  init.state = qp_state::init;
  init.port_num = 1;
  init.qkey = default_qkey;
  init.access_flags = access::remote_write;
  qp_attr rtr;
  rtr.state = qp_state::rtr;
  rtr.path_mtu = mtu::mtu_1024;
  rtr.dest_qp_num = peer.qp_num();
  rtr.av.is_global = true;
  rtr.av.grh.dgid = peer.local_endpoint().gid;
  rtr.av.grh.sgid_index = 1;
  rtr.max_dest_rd_atomic = 1;
  rtr.min_rnr_timer = 12;
  qp_attr rts;
  rts.state = qp_state::rts;
  rts.timeout = 14;
  rts.retry_cnt = 6;
  rts.rnr_retry = 6;
  rts.max_rd_atomic = 1;
  for (auto [attr, mask] : {std::pair{init, T::init_mask}, std::pair{rtr, T::rtr_mask}, std::pair{rts, T::rts_mask}}) {
    for (std::uint32_t bit = 2; bit < 32; bit <<= 1) {
      auto b = static_cast<m>(bit);
      if (!has_all(mask, b)) continue;
      INFO("dropping " << to_string(b) << " from " << to_string(mask));
      CHECK_THROWS_AS(B::modify_qp(q, attr, mask & ~b), verbs_error);
    }
    CHECK_NOTHROW(B::modify_qp(q, attr, mask));
  }
  CHECK(B::query_qp_state(q) == qp_state::rts);
  B::destroy_qp(q);
}
}  // namespace

TEST_CASE_TEMPLATE("every bit of each mask is required by the mock's transition table", T, rc, uc, ud) {
  masks_against_mock<T>();
}
