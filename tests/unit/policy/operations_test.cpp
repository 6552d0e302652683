// rdmakit/operations.hpp: operations as values, posted alone or in a post list through
// one path each, on the mock.
#include "fixture.hpp"

#include <cstring>

using namespace policy_test;

namespace {
using rc_live = queue_pair<B, rc, signal_all, qp_state::rts>;
using uc_live = queue_pair<B, uc, signal_all, qp_state::rts>;
using ud_live = queue_pair<B, ud, signal_all, qp_state::rts>;
using rw_region = remote_region<rw_access>;
using atomic_region = remote_region<all_access>;

// What generic code can ask before it posts.
static_assert(can_post<rc_live, op::read<rw_access>>);
static_assert(!can_post<uc_live, op::read<rw_access>>);
static_assert(can_post<uc_live, op::write<rw_access>>);
static_assert(!can_post<ud_live, op::write<rw_access>>);
static_assert(!can_post<ud_live, op::send<>>);
static_assert(can_post<ud_live, op::ud_send<B>>);
static_assert(!can_post<rc_live, op::ud_send<B>>);
static_assert(!can_post<uc_live, op::fetch_add<all_access>>);
static_assert(!can_post<queue_pair<B, rc>, op::write<rw_access>>);  // INIT: not yet
static_assert(operation<op::compare_swap<all_access>>);
static_assert(!operation<int>);

// Deduction from the arguments: one buffer or a list, the region's rights.
static_assert(std::is_same_v<decltype(op::write{local_buffer{}, rw_region{}}), op::write<rw_access, local_buffer>>);
static_assert(std::is_same_v<decltype(op::read{std::span<const local_buffer>{}, rw_region{}}),
                             op::read<rw_access, std::span<const local_buffer>>>);
static_assert(std::is_same_v<decltype(op::fetch_add{local_buffer{}, atomic_region{}, 1}), op::fetch_add<all_access>>);
}  // namespace

TEST_CASE("post(op): the same operation values as the named calls, gathered or not") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto dst = y.pd.allocate<all_access>(64);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 2, 2, 0});
  std::memcpy(src.data(), "abcdefgh", 8);
  const local_buffer halves[2] = {src.local(0, 4), src.local(4, 4)};
  REQUIRE(p.a.post(op::write{std::span<const local_buffer>(halves), dst.remote()}, 1).ok());
  REQUIRE(p.a.post(op::read{src.local(8, 8), dst.remote().sub(0, 8)}, 2).ok());
  std::uint64_t one = 1;
  std::memcpy(dst.data() + 16, &one, 8);
  REQUIRE(p.a.post(op::fetch_add{src.local(16, 8), dst.remote().sub(16, 8), 41}, 3).ok());
  auto got = collect(x.cq, 3);
  REQUIRE(got.size() == 3);
  for (const auto& c : got) CHECK(c.status == wc_status::success);
  CHECK(std::memcmp(dst.data(), "abcdefgh", 8) == 0);
  CHECK(std::memcmp(src.data() + 8, "abcdefgh", 8) == 0);
  std::uint64_t now = 0;
  std::memcpy(&now, dst.data() + 16, 8);
  CHECK(now == 42);
}

TEST_CASE("batch.add(op): lists take every operation, including gathered READs and UD send_imm") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto src = x.pd.allocate<all_access>(64);
  auto dst = y.pd.allocate<all_access>(64);
  std::memcpy(dst.data(), "12345678", 8);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 2, 2, 0});
  auto batch = decltype(p.a)::make_batch<4, 2>();
  const local_buffer halves[2] = {src.local(0, 4), src.local(4, 4)};
  CHECK(batch.add(op::read{std::span<const local_buffer>(halves), dst.remote().sub(0, 8)}, 1));
  std::memcpy(src.data() + 32, "ABCDEFGH", 8);
  const local_buffer other[2] = {src.local(32, 4), src.local(36, 4)};
  CHECK(batch.write(std::span<const local_buffer>(other), dst.remote().sub(8, 8), 2));  // gathered write
  REQUIRE(p.a.post(batch).ok());
  auto got = collect(x.cq, 2);
  REQUIRE(got.size() == 2);
  CHECK(std::memcmp(src.data(), "12345678", 8) == 0);
  CHECK(std::memcmp(dst.data() + 8, "ABCDEFGH", 8) == 0);

  // UD: send_imm to an address handle, from a post list.
  auto ux = x.pd.create_qp<ud>(x.cq, qp_cap{8, 8}).activate();
  auto uy = y.pd.create_qp<ud>(y.cq, qp_cap{8, 8}).activate();
  auto rx = y.pd.allocate<access::local_write>(256);
  REQUIRE(uy.post_recv(rx.local(), 7).ok());
  auto ah = x.pd.create_ah(uy.local_endpoint());
  auto ub = decltype(ux)::make_batch<2>();
  CHECK(ub.add(op::ud_send_imm{src.local(0, 8), ah.to(uy.qp_num()), 0xfeed}, 8));
  REQUIRE(ux.post(ub).ok());
  auto in = collect(y.cq, 1);
  REQUIRE(in.size() == 1);
  CHECK(in[0].has_imm);
  CHECK(in[0].imm == 0xfeed);
}

// A type of the user's own carrying BIND_MW or LOCAL_INV was an operation: posted, its
// BIND_MW read window arguments nobody had set (a null pointer: SIGSEGV in the noexcept
// post), and its LOCAL_INV reached a window unbound (which panics rxe's kernel), past
// memory_window's checks (found by an audit). Only memory_window's own ops carry them.
namespace {
template <opcode Code>
struct own_window_op {
  std::span<const local_buffer> local;
  static constexpr opcode code = Code;
  using rule = detail::window_rule;
  template <class D>
  void fill(D&) const noexcept {}
};
static_assert(!operation<own_window_op<opcode::bind_mw>>);
static_assert(!operation<own_window_op<opcode::local_inv>>);
static_assert(operation<own_window_op<opcode::send>>);
static_assert(operation<op::bind_window<B>> && operation<op::invalidate_window>);
}  // namespace
