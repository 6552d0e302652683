#include "fixture.hpp"

#include <cstring>

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
  // SEND_WITH_INV as op::send_inv (memory_window.hpp): the IBA has it on RC only.
  for (auto op : {opcode::rdma_read, opcode::atomic_cmp_and_swp, opcode::atomic_fetch_and_add,
                  opcode::send_with_inv}) {
    CHECK(allows<rc>(op));
    CHECK_FALSE(allows<uc>(op));
    CHECK_FALSE(allows<ud>(op));
  }
  for (auto op : {opcode::bind_mw, opcode::local_inv}) {
    CHECK(allows<rc>(op));
    CHECK(allows<uc>(op));
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
  for (const auto& step : {std::pair{init, T::init_mask}, std::pair{rtr, T::rtr_mask}, std::pair{rts, T::rts_mask}}) {
    const auto& attr = step.first;  // not structured bindings: clang 14 cannot capture them (INFO)
    const auto mask = step.second;
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

namespace {
// A transport queue_pair has never heard of: RC that refuses atomics both ways. It is
// RC on the wire (type), but its own facts and RESET→INIT attributes, so the atomics
// stop at compile time here and at the responder for peers.
struct rc_no_atomics {
  static constexpr qp_type type = qp_type::rc;
  static constexpr std::string_view name = "RC without atomics";
  static constexpr bool connected = true;
  static constexpr bool supports_write = true;
  static constexpr bool supports_read = true;
  static constexpr bool supports_atomic = false;
  static constexpr bool needs_ah = false;
  static constexpr std::uint32_t recv_offset = 0;
  static constexpr qp_attr_mask init_mask = rc::init_mask;
  static constexpr qp_attr_mask rtr_mask = rc::rtr_mask;
  static constexpr qp_attr_mask rts_mask = rc::rts_mask;
  static qp_attr init_attr(const qp_options& o) noexcept {
    qp_attr a = rc::init_attr(o);
    a.access_flags = a.access_flags & (access::remote_write | access::remote_read);
    return a;
  }
  static void rtr_attr(qp_attr& a, const connect_options& o, const device_attr& d) noexcept { rc::rtr_attr(a, o, d); }
  static void rts_attr(qp_attr& a, const connect_options& o, const device_attr& d) noexcept { rc::rts_attr(a, o, d); }
};
static_assert(transport<rc_no_atomics>);
static_assert(!can_post<queue_pair<B, rc_no_atomics, signal_all, qp_state::rts>, op::fetch_add<all_access>>);
static_assert(can_post<queue_pair<B, rc_no_atomics, signal_all, qp_state::rts>, op::read<all_access>>);
}  // namespace

TEST_CASE("a transport defined outside the library runs on the unchanged queue_pair") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto mx = x.pd.allocate<all_access>(64);
  auto my = y.pd.allocate<all_access>(64);
  auto qx = x.pd.create_qp<rc_no_atomics>(x.cq, qp_cap{8, 8});
  auto qy = y.pd.create_qp<rc>(y.cq, qp_cap{8, 8});
  const auto ex = qx.local_endpoint();
  auto lx = std::move(qx).connect(qy.local_endpoint());
  auto ly = std::move(qy).connect(ex);
  std::memcpy(mx.data(), "policy", 7);
  REQUIRE(lx.write(mx.local(0, 7), my.remote(), 1).ok());
  REQUIRE(lx.read(mx.local(8, 7), my.remote().sub(0, 7), 2).ok());
  auto got = collect(x.cq, 2);
  REQUIRE(got.size() == 2);
  CHECK(got[0].status == wc_status::success);
  CHECK(got[1].status == wc_status::success);
  CHECK(std::memcmp(mx.data() + 8, "policy", 7) == 0);
  // Its INIT attributes reached the device: a peer's atomic is refused at this QP.
  REQUIRE(ly.fetch_add(my.local(16, 8), mx.remote().sub(16, 8), 1, 3).ok());
  auto refused = collect(y.cq, 1);
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].status == wc_status::rem_inv_req_err);
}
