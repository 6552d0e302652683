// The ibverbs backend. The first part needs no hardware; the cases marked
// "[device]" run only when RDMAKIT_DEVICE names an RDMA device (tests/rxe runs them
// in a VM with RDMAKIT_DEVICE=rxe0 RDMAKIT_GID_INDEX=1) and are skipped otherwise.
#include <rdmakit/backends/ibverbs.hpp>

#include <doctest/doctest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using namespace rdmakit;
using B = backends::ibverbs;
namespace ibd = rdmakit::ibverbs::detail;

namespace {

std::optional<std::string> device_under_test() {
  const char* d = std::getenv("RDMAKIT_DEVICE");
  if (!d || !*d) return std::nullopt;
  return std::string(d);
}
bool no_device() { return !device_under_test(); }

std::optional<int> gid_index_from_env() {
  const char* g = std::getenv("RDMAKIT_GID_INDEX");
  if (!g || !*g) return std::nullopt;
  int i = -1;
  const std::string_view v(g);
  if (auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), i); ec != std::errc{} || end != v.data() + v.size() || i < 0)
    throw std::invalid_argument("RDMAKIT_GID_INDEX=" + std::string(v) +
                                " is not a GID index: give a number from 0 (ibv_devinfo -v lists them)");
  return i;
}

}  // namespace

// ---------------------------------------------------------------- no hardware

TEST_CASE("the ibverbs backend satisfies verbs_backend with native types") {
  CHECK(verbs_backend<B>);
  CHECK(std::is_same_v<B::context, ibv_context*>);
  CHECK(std::is_same_v<B::qp, ibv_qp*>);
  CHECK(std::is_same_v<B::sge, ibv_sge>);
  CHECK(std::is_same_v<B::send_wr, ibv_send_wr>);
  CHECK(std::is_same_v<B::recv_wr, ibv_recv_wr>);
  CHECK(std::is_same_v<B::wc, ibv_wc>);
  CHECK(B::name == "ibverbs");
}

TEST_CASE("rdmakit enumerators carry the ibverbs ABI values") {
  // Everything the backend casts is static_asserted in abi.hpp; spot-check at run time too.
  CHECK(static_cast<int>(wc_status::rnr_retry_exc_err) == IBV_WC_RNR_RETRY_EXC_ERR);
  CHECK(static_cast<int>(wc_opcode::recv_rdma_with_imm) == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(static_cast<int>(opcode::atomic_fetch_and_add) == IBV_WR_ATOMIC_FETCH_AND_ADD);
  CHECK(to_underlying(qp_attr_mask::dest_qpn) == IBV_QP_DEST_QPN);
  CHECK(to_underlying(access::remote_atomic) == IBV_ACCESS_REMOTE_ATOMIC);
  CHECK(static_cast<int>(gid_type::roce_v2) == IBV_GID_TYPE_ROCE_V2);
  CHECK(static_cast<int>(async_event_type::gid_change) == IBV_EVENT_GID_CHANGE);
  CHECK(sizeof(rdmakit::sge) == sizeof(ibv_sge));
}

TEST_CASE("set_* write straight into the native work requests") {
  ibv_sge sg[2]{};
  B::set_sge(sg[0], 0x1000, 64, 0xabc);
  CHECK(sg[0].addr == 0x1000);
  CHECK(sg[0].length == 64);
  CHECK(sg[0].lkey == 0xabc);

  ibv_send_wr w{}, w2{};
  B::set_send(w, 42, opcode::rdma_write_with_imm, send_flags::none, sg, 2);
  B::set_send_flags(w, send_flags::signaled | send_flags::inline_data);  // the flags alone
  B::set_next(w, &w2);
  B::set_imm(w, htonl(7));
  B::set_rdma(w, 0xdead0000, 0x55);
  CHECK(w.wr_id == 42);
  CHECK(w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
  CHECK(w.send_flags == (IBV_SEND_SIGNALED | IBV_SEND_INLINE));
  CHECK(w.sg_list == sg);
  CHECK(w.num_sge == 2);
  CHECK(w.next == &w2);
  CHECK(w.imm_data == htonl(7));
  CHECK(w.wr.rdma.remote_addr == 0xdead0000);
  CHECK(w.wr.rdma.rkey == 0x55);

  B::set_atomic(w, 0x2000, 9, 1, 2);
  CHECK(w.wr.atomic.remote_addr == 0x2000);
  CHECK(w.wr.atomic.rkey == 9);
  CHECK(w.wr.atomic.compare_add == 1);
  CHECK(w.wr.atomic.swap == 2);

  auto* fake_ah = reinterpret_cast<ibv_ah*>(0x10);
  B::set_ud(w, fake_ah, 0x123, default_qkey);
  CHECK(w.wr.ud.ah == fake_ah);
  CHECK(w.wr.ud.remote_qpn == 0x123);
  CHECK(w.wr.ud.remote_qkey == default_qkey);

  B::set_send(w, 43, opcode::send, send_flags::none, sg, 1);
  CHECK(w.next == nullptr);  // set_send starts a fresh chain

  ibv_recv_wr r{}, r2{};
  B::set_recv(r, 5, sg, 1);
  B::set_next(r, &r2);
  CHECK(r.wr_id == 5);
  CHECK(r.sg_list == sg);
  CHECK(r.num_sge == 1);
  CHECK(r.next == &r2);
}

TEST_CASE("get_* read ibv_wc fields") {
  ibv_wc w{};
  w.wr_id = 99;
  w.status = IBV_WC_REM_ACCESS_ERR;
  w.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  w.byte_len = 1234;
  w.qp_num = 0x11;
  w.src_qp = 0x22;
  w.slid = 0x1234;
  w.sl = 7;
  w.wc_flags = IBV_WC_WITH_IMM | IBV_WC_GRH | IBV_WC_IP_CSUM_OK;
  w.imm_data = htonl(0xfeed);
  w.vendor_err = 0x81;
  CHECK(B::get_wr_id(w) == 99);
  CHECK(B::get_status(w) == wc_status::rem_access_err);
  CHECK(B::get_opcode(w) == wc_opcode::recv_rdma_with_imm);
  CHECK(B::get_byte_len(w) == 1234);
  CHECK(B::get_qp_num(w) == 0x11);
  CHECK(B::get_src_qp(w) == 0x22);
  CHECK(B::get_slid(w) == 0x1234);
  CHECK(B::get_sl(w) == 7);
  CHECK(B::get_wc_flags(w) == (wc_flags::with_imm | wc_flags::grh));  // IP_CSUM_OK masked off
  CHECK(ntohl(B::get_imm(w)) == 0xfeed);
  CHECK(B::get_vendor_err(w) == 0x81);
}

TEST_CASE("qp_attr and ah_attr convert field by field") {
  qp_attr a;
  a.state = qp_state::rtr;
  a.cur_state = qp_state::init;
  a.path_mtu = mtu::mtu_4096;
  a.qkey = 0x1234;
  a.rq_psn = 0x111;
  a.sq_psn = 0x222;
  a.dest_qp_num = 0x333;
  a.access_flags = access::remote_read | access::remote_write;
  a.av.is_global = true;
  a.av.grh.dgid = gid::from_ipv4(10, 0, 0, 9);
  a.av.grh.sgid_index = 1;
  a.av.grh.hop_limit = 64;
  a.av.grh.traffic_class = 3;
  a.av.grh.flow_label = 0xabc;
  a.av.dlid = 7;
  a.av.sl = 2;
  a.av.port_num = 1;
  a.pkey_index = 4;
  a.max_rd_atomic = 8;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.port_num = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 6;
  const ibv_qp_attr o = ibd::to_ibv(a);
  CHECK(o.qp_state == IBV_QPS_RTR);
  CHECK(o.cur_qp_state == IBV_QPS_INIT);
  CHECK(o.path_mtu == IBV_MTU_4096);
  CHECK(o.qkey == 0x1234);
  CHECK(o.rq_psn == 0x111);
  CHECK(o.sq_psn == 0x222);
  CHECK(o.dest_qp_num == 0x333);
  CHECK(o.qp_access_flags == (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE));
  CHECK(o.ah_attr.is_global == 1);
  CHECK(o.ah_attr.grh.dgid.raw[10] == 0xff);
  CHECK(o.ah_attr.grh.dgid.raw[15] == 9);
  CHECK(o.ah_attr.grh.sgid_index == 1);
  CHECK(o.ah_attr.grh.hop_limit == 64);
  CHECK(o.ah_attr.grh.traffic_class == 3);
  CHECK(o.ah_attr.grh.flow_label == 0xabc);
  CHECK(o.ah_attr.dlid == 7);
  CHECK(o.ah_attr.sl == 2);
  CHECK(o.ah_attr.port_num == 1);
  CHECK(o.pkey_index == 4);
  CHECK(o.max_rd_atomic == 8);
  CHECK(o.max_dest_rd_atomic == 16);
  CHECK(o.min_rnr_timer == 12);
  CHECK(o.port_num == 1);
  CHECK(o.timeout == 14);
  CHECK(o.retry_cnt == 7);
  CHECK(o.rnr_retry == 6);
}

TEST_CASE("modify_qp failures are explained from the transition table") {
  using m = qp_attr_mask;
  auto text = ibd::explain_mask(qp_type::rc, qp_state::reset, qp_state::init,
                                m::state | m::pkey_index | m::port | m::qkey);
  CHECK(text.find("missing required ACCESS_FLAGS") != std::string::npos);
  CHECK(text.find("not allowed here QKEY") != std::string::npos);

  text = ibd::explain_mask(qp_type::ud, qp_state::reset, qp_state::init,
                           m::state | m::pkey_index | m::port | m::qkey);
  CHECK(text.empty());  // the mask is right

  text = ibd::explain_mask(qp_type::uc, qp_state::init, qp_state::rtr,
                           m::state | m::av | m::path_mtu | m::dest_qpn | m::rq_psn | m::max_dest_rd_atomic);
  CHECK(text == "not allowed here MAX_DEST_RD_ATOMIC");

  text = ibd::explain_mask(qp_type::rc, qp_state::rtr, qp_state::rts, m::state | m::sq_psn);
  CHECK(text == "missing required TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC");

  CHECK(ibd::explain_mask(qp_type::rc, qp_state::reset, qp_state::err, m::state).find("not legal") !=
        std::string::npos);
}

TEST_CASE("errno normalisation covers every libibverbs convention") {
  CHECK(ibd::rc_errno(0) == 0);
  CHECK(ibd::rc_errno(EINVAL) == EINVAL);   // returned as the value
  CHECK(ibd::rc_errno(-ENOMEM) == ENOMEM);  // some providers return -errno
  errno = EBUSY;
  CHECK(ibd::rc_errno(-1) == EBUSY);  // -1 with errno set
  errno = 0;
  CHECK(ibd::rc_errno(-1) == EIO);
}

TEST_CASE("device_names lists the devices, or nothing without RDMA support") {
  std::vector<std::string> names;
  REQUIRE_NOTHROW(names = B::device_names());
  MESSAGE("RDMA devices: " << names.size());
  for (const auto& n : names) {
    MESSAGE("  " << n);
    CHECK_FALSE(n.empty());
  }
  if (auto dev = device_under_test())
    CHECK(std::find(names.begin(), names.end(), *dev) != names.end());
}

TEST_CASE("open_device of an unknown name throws ENODEV naming it") {
  try {
    B::context ctx = B::open_device("no-such-device");
    B::close_device(ctx);
    FAIL("open_device should have thrown");
  } catch (const verbs_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.verb() == "ibv_open_device");
    CHECK(e.errno_value() == ENODEV);
    CHECK(e.code() == std::errc::no_such_device);
    CHECK(what.find("no-such-device") != std::string::npos);
    if (B::device_names().empty())
      CHECK(what.find("no RDMA devices found") != std::string::npos);
    else
      CHECK(what.find("devices present:") != std::string::npos);
  }
}

TEST_CASE("hardware cases need RDMAKIT_DEVICE") {
  if (no_device())
    MESSAGE("RDMAKIT_DEVICE is not set: the [device] cases are skipped (tests/rxe/run-in-vm.sh runs "
            "them on rxe0)");
  else
    MESSAGE("testing on " << *device_under_test());
}

// ------------------------------------------------------------------- device

namespace {

struct device_fixture {
  B::context ctx{};
  std::uint8_t port = 1;
  port_attr pa{};
  int gid_index = 0;
  gid_entry sgid{};

  device_fixture() {
    ctx = B::open_device(*device_under_test());
    pa = B::query_port(ctx, port);
    gid_index = gid_index_from_env().value_or(backends::choose_gid(ctx, port));
    sgid = B::query_gid(ctx, port, gid_index);
  }
  ~device_fixture() { B::close_device(ctx); }
  device_fixture(const device_fixture&) = delete;
  device_fixture& operator=(const device_fixture&) = delete;
};

bool wait_for(B::cq cq, std::vector<ibv_wc>& out, std::size_t n,
              std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (out.size() < n) {
    ibv_wc batch[8];
    const int got = B::poll_cq(cq, 8, batch);
    if (got < 0) return false;
    out.insert(out.end(), batch, batch + got);
    if (got == 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
  }
  return true;
}

const ibv_wc* find_wc(const std::vector<ibv_wc>& wcs, std::uint64_t wr_id) {
  for (const auto& w : wcs)
    if (w.wr_id == wr_id) return &w;
  return nullptr;
}

// Two RC QPs on one device, connected to each other (loopback), sharing one CQ.
struct rc_pair : device_fixture {
  static constexpr std::size_t buf_size = 8192;
  B::pd pd{};
  B::cq cq{};
  B::qp a{};
  B::qp b{};
  B::mr mr_a{};
  B::mr mr_b{};
  std::vector<unsigned char> buf_a = std::vector<unsigned char>(buf_size);
  std::vector<unsigned char> buf_b = std::vector<unsigned char>(buf_size);
  qp_cap caps{};

  rc_pair() {
    pd = B::alloc_pd(ctx);
    cq = B::create_cq(ctx, 64, nullptr, 0);
    caps.max_send_wr = 16;
    caps.max_recv_wr = 16;
    caps.max_send_sge = 1;
    caps.max_recv_sge = 1;
    caps.max_inline_data = 64;
    qp_cap caps_b = caps;
    a = B::create_qp(pd, cq, cq, qp_type::rc, caps, false);
    b = B::create_qp(pd, cq, cq, qp_type::rc, caps_b, false);
    const rdmakit::access acc = access::local_write | access::remote_write | access::remote_read | access::remote_atomic;
    mr_a = B::reg_mr(pd, buf_a.data(), buf_size, acc);
    mr_b = B::reg_mr(pd, buf_b.data(), buf_size, acc);
    connect(a, B::qp_num(b), 100, 200);
    connect(b, B::qp_num(a), 200, 100);
  }
  ~rc_pair() {
    if (a) B::destroy_qp(a);
    if (b) B::destroy_qp(b);
    if (mr_a) B::dereg_mr(mr_a);
    if (mr_b) B::dereg_mr(mr_b);
    if (cq) B::destroy_cq(cq);
    if (pd) B::dealloc_pd(pd);
  }

  void connect(B::qp q, std::uint32_t dest_qpn, std::uint32_t my_psn, std::uint32_t peer_psn) {
    using m = qp_attr_mask;
    qp_attr at;
    at.state = qp_state::init;
    at.pkey_index = 0;
    at.port_num = port;
    at.access_flags = access::remote_write | access::remote_read | access::remote_atomic;
    B::modify_qp(q, at, m::state | m::pkey_index | m::port | m::access_flags);
    CHECK(B::query_qp_state(q) == qp_state::init);

    at = {};
    at.state = qp_state::rtr;
    at.path_mtu = pa.active_mtu;
    at.dest_qp_num = dest_qpn;
    at.rq_psn = peer_psn;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = 12;
    at.av.port_num = port;
    at.av.dlid = pa.lid;
    if (pa.layer == link_layer::ethernet || sgid.valid) {
      at.av.is_global = true;
      at.av.grh.dgid = sgid.value;  // loopback: the peer is this port
      at.av.grh.sgid_index = static_cast<std::uint8_t>(gid_index);
      at.av.grh.hop_limit = 1;
    }
    B::modify_qp(q, at,
                 m::state | m::av | m::path_mtu | m::dest_qpn | m::rq_psn | m::max_dest_rd_atomic |
                     m::min_rnr_timer);
    CHECK(B::query_qp_state(q) == qp_state::rtr);

    at = {};
    at.state = qp_state::rts;
    at.sq_psn = my_psn;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 1;
    B::modify_qp(q, at, m::state | m::sq_psn | m::timeout | m::retry_cnt | m::rnr_retry | m::max_qp_rd_atomic);
    CHECK(B::query_qp_state(q) == qp_state::rts);
  }

  std::uint64_t addr_a(std::size_t off = 0) { return reinterpret_cast<std::uintptr_t>(buf_a.data()) + off; }
  std::uint64_t addr_b(std::size_t off = 0) { return reinterpret_cast<std::uintptr_t>(buf_b.data()) + off; }
};

}  // namespace

TEST_CASE("[device] query_device, query_port and the GID table" * doctest::skip(no_device())) {
  device_fixture d;
  CHECK(B::device_name(d.ctx) == *device_under_test());
  const device_attr da = B::query_device(d.ctx);
  MESSAGE("max_qp_wr=" << da.max_qp_wr << " max_sge=" << da.max_sge << " max_cqe=" << da.max_cqe
                       << " max_inline_data(probed)=" << da.max_inline_data << " atomics=" << da.atomics);
  CHECK(da.max_qp_wr > 0);
  CHECK(da.max_sge > 0);
  CHECK(da.max_cqe > 0);
  CHECK(da.phys_port_cnt >= 1);
  CHECK(da.max_inline_data > 0);
  CHECK(B::query_device(d.ctx).max_inline_data == da.max_inline_data);  // probed again, same answer

  CHECK(d.pa.state == port_state::active);
  CHECK(d.pa.gid_tbl_len > 0);
  CHECK(mtu_bytes(d.pa.active_mtu) >= 256);
  CHECK(static_cast<int>(d.pa.active_mtu) <= static_cast<int>(d.pa.max_mtu));
  MESSAGE("port 1: " << std::string(to_string(d.pa.layer)) << ", active MTU " << mtu_bytes(d.pa.active_mtu) << ", "
                     << d.pa.gid_tbl_len << " GIDs" << detail::describe_gid_table<B>(d.ctx, 1, d.pa));

  if (auto want = gid_index_from_env()) {
    // rxe on an IPv4 interface: index 1 is the IPv4-mapped RoCEv2 GID, and choose_gid picks it.
    const gid_entry g = B::query_gid(d.ctx, 1, *want);
    CHECK(g.valid);
    CHECK(g.index == static_cast<std::uint32_t>(*want));
    CHECK(g.type == gid_type::roce_v2);
    CHECK(g.value.is_ipv4_mapped());
    CHECK(backends::choose_gid(d.ctx, 1) == *want);
  }
  CHECK_THROWS_AS(B::query_port(d.ctx, 77), verbs_error);
  try {
    B::query_gid(d.ctx, 1, static_cast<int>(d.pa.gid_tbl_len) + 5);
    FAIL("query_gid past the table should throw");
  } catch (const verbs_error& e) {
    MESSAGE(std::string(e.what()));
    CHECK(std::string(e.what()).find("GID index") != std::string::npos);
  }
  async_event ev;
  CHECK(B::get_async_event(d.ctx, std::chrono::milliseconds(20), ev) == ETIMEDOUT);
}

TEST_CASE("[device] create_qp checks caps against the device and writes back the grant" *
          doctest::skip(no_device())) {
  device_fixture d;
  const device_attr da = B::query_device(d.ctx);
  B::pd pd = B::alloc_pd(d.ctx);
  B::cq cq = B::create_cq(d.ctx, 33, nullptr, 0);
  CHECK(B::cq_capacity(cq) >= 33);

  qp_cap caps;
  caps.max_send_wr = 10;
  caps.max_recv_wr = 3;
  caps.max_inline_data = 16;
  B::qp q = B::create_qp(pd, cq, cq, qp_type::rc, caps, true);
  CHECK(caps.max_send_wr >= 10);
  CHECK(caps.max_recv_wr >= 3);
  CHECK(caps.max_inline_data >= 16);
  CHECK(B::query_qp_state(q) == qp_state::reset);
  CHECK(B::qp_num(q) != 0);

  // A wrong mask is explained: transition, mask, what is missing.
  qp_attr at;
  at.state = qp_state::init;
  try {
    B::modify_qp(q, at, qp_attr_mask::state | qp_attr_mask::port);
    FAIL("modify_qp should have thrown");
  } catch (const verbs_error& e) {
    const std::string what = e.what();
    MESSAGE(what);
    CHECK(e.verb() == "ibv_modify_qp");
    CHECK(what.find("RESET->INIT") != std::string::npos);
    CHECK(what.find("STATE|PORT") != std::string::npos);
  }
  CHECK(B::destroy_qp(q) == 0);

  qp_cap huge;
  huge.max_send_wr = da.max_qp_wr + 1;
  try {
    B::create_qp(pd, cq, cq, qp_type::rc, huge, true);
    FAIL("create_qp should have thrown");
  } catch (const verbs_error& e) {
    MESSAGE(std::string(e.what()));
    CHECK(e.errno_value() == EINVAL);
    CHECK(std::string(e.what()).find("max_qp_wr") != std::string::npos);
  }
  qp_cap fat_inline;
  fat_inline.max_send_wr = 1;
  fat_inline.max_inline_data = da.max_inline_data + 1;
  const std::string inline_limit = "max_inline_data (probed)=" + std::to_string(da.max_inline_data);
  CHECK_THROWS_WITH_AS(B::create_qp(pd, cq, cq, qp_type::rc, fat_inline, true),
                       doctest::Contains(inline_limit.c_str()), verbs_error);
  CHECK_THROWS_WITH_AS(B::create_cq(d.ctx, static_cast<int>(da.max_cqe) + 1, nullptr, 0),
                       doctest::Contains("max_cqe"), verbs_error);

  // RoCE without a GRH: the error says so.
  if (d.pa.layer == link_layer::ethernet) {
    qp_cap c2;
    c2.max_send_wr = 1;
    c2.max_recv_wr = 1;
    B::qp q2 = B::create_qp(pd, cq, cq, qp_type::rc, c2, true);
    using m = qp_attr_mask;
    qp_attr init;
    init.state = qp_state::init;
    init.port_num = d.port;
    B::modify_qp(q2, init, m::state | m::pkey_index | m::port | m::access_flags);
    qp_attr rtr;
    rtr.state = qp_state::rtr;
    rtr.path_mtu = mtu::mtu_1024;
    rtr.dest_qp_num = B::qp_num(q2);
    rtr.av.port_num = d.port;  // is_global = false
    try {
      B::modify_qp(q2, rtr,
                   m::state | m::av | m::path_mtu | m::dest_qpn | m::rq_psn | m::max_dest_rd_atomic |
                       m::min_rnr_timer);
      FAIL("INIT->RTR without a GRH on RoCE should fail");
    } catch (const verbs_error& e) {
      const std::string what = e.what();
      MESSAGE(what);
      CHECK(what.find("INIT->RTR") != std::string::npos);
      CHECK(what.find("is_global") != std::string::npos);
    }
    CHECK(B::destroy_qp(q2) == 0);
  }

  // Remote write without local write is refused with a hint.
  std::vector<unsigned char> buf(256);
  try {
    B::mr m = B::reg_mr(pd, buf.data(), buf.size(), access::remote_write);
    B::dereg_mr(m);
    FAIL("reg_mr(REMOTE_WRITE) without LOCAL_WRITE should fail");
  } catch (const verbs_error& e) {
    const std::string what = e.what();
    MESSAGE(what);
    CHECK(e.errno_value() == EINVAL);
    CHECK(what.find("require LOCAL_WRITE") != std::string::npos);
  }

  CHECK(B::destroy_cq(cq) == 0);
  CHECK(B::dealloc_pd(pd) == 0);
}

TEST_CASE("[device] two RC QPs in loopback: SEND/RECV, WRITE, READ" * doctest::skip(no_device())) {
  rc_pair p;
  std::vector<ibv_wc> wcs;

  SUBCASE("SEND/RECV with immediate") {
    const char msg[] = "hello over rdmakit";
    std::memcpy(p.buf_a.data(), msg, sizeof msg);
    ibv_sge rs{}, ss{};
    B::set_sge(rs, p.addr_b(), 4096, B::mr_lkey(p.mr_b));
    ibv_recv_wr rwr{};
    B::set_recv(rwr, 1, &rs, 1);
    ibv_recv_wr* bad_r = nullptr;
    REQUIRE(B::post_recv(p.b, &rwr, &bad_r) == 0);

    B::set_sge(ss, p.addr_a(), sizeof msg, B::mr_lkey(p.mr_a));
    ibv_send_wr swr{};
    B::set_send(swr, 2, opcode::send_with_imm, send_flags::signaled, &ss, 1);
    B::set_imm(swr, htonl(0xabcd));
    ibv_send_wr* bad_s = nullptr;
    REQUIRE(B::post_send(p.a, &swr, &bad_s) == 0);

    REQUIRE(wait_for(p.cq, wcs, 2));
    const ibv_wc* s = find_wc(wcs, 2);
    const ibv_wc* r = find_wc(wcs, 1);
    REQUIRE(s);
    REQUIRE(r);
    CHECK(B::get_status(*s) == wc_status::success);
    CHECK(B::get_opcode(*s) == wc_opcode::send);
    CHECK(B::get_qp_num(*s) == B::qp_num(p.a));
    CHECK(B::get_status(*r) == wc_status::success);
    CHECK(B::get_opcode(*r) == wc_opcode::recv);
    CHECK(B::get_byte_len(*r) == sizeof msg);
    CHECK(B::get_qp_num(*r) == B::qp_num(p.b));
    CHECK(has_all(B::get_wc_flags(*r), wc_flags::with_imm));
    CHECK(ntohl(B::get_imm(*r)) == 0xabcd);
    CHECK(std::memcmp(p.buf_b.data(), msg, sizeof msg) == 0);
  }

  SUBCASE("inline SEND needs no lkey and the buffer is reusable at once") {
    char msg[32] = "inline payload";
    ibv_sge rs{}, ss{};
    B::set_sge(rs, p.addr_b(), 4096, B::mr_lkey(p.mr_b));
    ibv_recv_wr rwr{};
    B::set_recv(rwr, 3, &rs, 1);
    ibv_recv_wr* bad_r = nullptr;
    REQUIRE(B::post_recv(p.b, &rwr, &bad_r) == 0);
    B::set_sge(ss, reinterpret_cast<std::uintptr_t>(msg), sizeof msg, 0);
    ibv_send_wr swr{};
    B::set_send(swr, 4, opcode::send, send_flags::signaled | send_flags::inline_data, &ss, 1);
    ibv_send_wr* bad_s = nullptr;
    REQUIRE(B::post_send(p.a, &swr, &bad_s) == 0);
    std::memset(msg, 'x', sizeof msg);  // inline: already copied
    REQUIRE(wait_for(p.cq, wcs, 2));
    const ibv_wc* r = find_wc(wcs, 3);
    REQUIRE(r);
    CHECK(B::get_status(*r) == wc_status::success);
    CHECK(B::get_byte_len(*r) == 32);
    CHECK(std::string(reinterpret_cast<const char*>(p.buf_b.data())) == "inline payload");
  }

  SUBCASE("RDMA WRITE then READ") {
    for (std::size_t i = 0; i < 4096; ++i) p.buf_a[i] = static_cast<unsigned char>(i * 7);
    ibv_sge ws{};
    B::set_sge(ws, p.addr_a(), 4096, B::mr_lkey(p.mr_a));
    ibv_send_wr w{};
    B::set_send(w, 10, opcode::rdma_write, send_flags::signaled, &ws, 1);
    B::set_rdma(w, p.addr_b(1024), B::mr_rkey(p.mr_b));
    ibv_send_wr* bad = nullptr;
    REQUIRE(B::post_send(p.a, &w, &bad) == 0);
    REQUIRE(wait_for(p.cq, wcs, 1));
    CHECK(B::get_status(wcs[0]) == wc_status::success);
    CHECK(B::get_opcode(wcs[0]) == wc_opcode::rdma_write);
    CHECK(std::memcmp(p.buf_b.data() + 1024, p.buf_a.data(), 4096) == 0);

    // READ it back from B into A's second half.
    wcs.clear();
    ibv_sge rs{};
    B::set_sge(rs, p.addr_a(4096), 4096, B::mr_lkey(p.mr_a));
    ibv_send_wr r{};
    B::set_send(r, 11, opcode::rdma_read, send_flags::signaled, &rs, 1);
    B::set_rdma(r, p.addr_b(1024), B::mr_rkey(p.mr_b));
    REQUIRE(B::post_send(p.a, &r, &bad) == 0);
    REQUIRE(wait_for(p.cq, wcs, 1));
    CHECK(B::get_wr_id(wcs[0]) == 11);
    CHECK(B::get_status(wcs[0]) == wc_status::success);
    CHECK(B::get_opcode(wcs[0]) == wc_opcode::rdma_read);
    CHECK(B::get_byte_len(wcs[0]) == 4096);
    CHECK(std::memcmp(p.buf_a.data() + 4096, p.buf_a.data(), 4096) == 0);
  }

  SUBCASE("atomics: FETCH_AND_ADD then CMP_AND_SWP") {
    if (!B::query_device(p.ctx).atomics) {
      MESSAGE("the device has no atomics: skipped");
      return;
    }
    std::uint64_t start = 40;
    std::memcpy(p.buf_b.data() + 64, &start, 8);
    ibv_sge as{};
    B::set_sge(as, p.addr_a(128), 8, B::mr_lkey(p.mr_a));
    ibv_send_wr w{};
    B::set_send(w, 30, opcode::atomic_fetch_and_add, send_flags::signaled, &as, 1);
    B::set_atomic(w, p.addr_b(64), B::mr_rkey(p.mr_b), 2, 0);
    ibv_send_wr* bad = nullptr;
    REQUIRE(B::post_send(p.a, &w, &bad) == 0);
    REQUIRE(wait_for(p.cq, wcs, 1));
    CHECK(B::get_status(wcs[0]) == wc_status::success);
    CHECK(B::get_opcode(wcs[0]) == wc_opcode::fetch_add);
    std::uint64_t v = 0;
    std::memcpy(&v, p.buf_a.data() + 128, 8);
    CHECK(v == 40);  // the old value comes back
    std::memcpy(&v, p.buf_b.data() + 64, 8);
    CHECK(v == 42);

    wcs.clear();
    B::set_send(w, 31, opcode::atomic_cmp_and_swp, send_flags::signaled, &as, 1);
    B::set_atomic(w, p.addr_b(64), B::mr_rkey(p.mr_b), 42, 7);
    REQUIRE(B::post_send(p.a, &w, &bad) == 0);
    REQUIRE(wait_for(p.cq, wcs, 1));
    CHECK(B::get_status(wcs[0]) == wc_status::success);
    CHECK(B::get_opcode(wcs[0]) == wc_opcode::comp_swap);
    std::memcpy(&v, p.buf_b.data() + 64, 8);
    CHECK(v == 7);
  }

  SUBCASE("RDMA WRITE with immediate consumes a receive") {
    ibv_recv_wr rwr{};
    B::set_recv(rwr, 40, nullptr, 0);
    ibv_recv_wr* bad_r = nullptr;
    REQUIRE(B::post_recv(p.b, &rwr, &bad_r) == 0);
    std::memcpy(p.buf_a.data(), "imm-write", 9);
    ibv_sge ws{};
    B::set_sge(ws, p.addr_a(), 9, B::mr_lkey(p.mr_a));
    ibv_send_wr w{};
    B::set_send(w, 41, opcode::rdma_write_with_imm, send_flags::signaled, &ws, 1);
    B::set_rdma(w, p.addr_b(512), B::mr_rkey(p.mr_b));
    B::set_imm(w, htonl(0x600d));
    ibv_send_wr* bad = nullptr;
    REQUIRE(B::post_send(p.a, &w, &bad) == 0);
    REQUIRE(wait_for(p.cq, wcs, 2));
    const ibv_wc* r = find_wc(wcs, 40);
    REQUIRE(r);
    CHECK(B::get_status(*r) == wc_status::success);
    CHECK(B::get_opcode(*r) == wc_opcode::recv_rdma_with_imm);
    CHECK(B::get_byte_len(*r) == 9);
    CHECK(ntohl(B::get_imm(*r)) == 0x600d);
    CHECK(std::memcmp(p.buf_b.data() + 512, "imm-write", 9) == 0);
  }

  SUBCASE("posting more SGEs than granted is refused at post time") {
    ibv_sge sg[40]{};
    for (auto& e : sg) B::set_sge(e, p.addr_a(), 1, B::mr_lkey(p.mr_a));
    ibv_send_wr w{};
    B::set_send(w, 50, opcode::send, send_flags::signaled, sg, 40);
    ibv_send_wr* bad = nullptr;
    CHECK(B::post_send(p.a, &w, &bad) != 0);
    CHECK(bad == &w);
  }

  SUBCASE("a bad rkey fails with REM_ACCESS_ERR") {
    ibv_sge ws{};
    B::set_sge(ws, p.addr_a(), 64, B::mr_lkey(p.mr_a));
    ibv_send_wr w{};
    B::set_send(w, 20, opcode::rdma_write, send_flags::signaled, &ws, 1);
    B::set_rdma(w, p.addr_b(), B::mr_rkey(p.mr_b) ^ 0x5a5a00);
    ibv_send_wr* bad = nullptr;
    REQUIRE(B::post_send(p.a, &w, &bad) == 0);
    REQUIRE(wait_for(p.cq, wcs, 1));
    CHECK(B::get_status(wcs[0]) == wc_status::rem_access_err);
    CHECK(B::query_qp_state(p.a) == qp_state::err);
  }
}

TEST_CASE("[device] completion events wait with a timeout" * doctest::skip(no_device())) {
  device_fixture d;
  B::channel ch = B::create_comp_channel(d.ctx);
  B::pd pd = B::alloc_pd(d.ctx);
  B::cq cq = B::create_cq(d.ctx, 8, ch, 0);
  qp_cap caps;
  caps.max_send_wr = 4;
  caps.max_recv_wr = 4;
  // A UD QP to itself: the least setup that produces a completion.
  B::qp q = B::create_qp(pd, cq, cq, qp_type::ud, caps, true);
  using m = qp_attr_mask;
  qp_attr at;
  at.state = qp_state::init;
  at.port_num = d.port;
  at.qkey = default_qkey;
  B::modify_qp(q, at, m::state | m::pkey_index | m::port | m::qkey);
  at = {};
  at.state = qp_state::rtr;
  B::modify_qp(q, at, m::state);
  at = {};
  at.state = qp_state::rts;
  at.sq_psn = 1;
  B::modify_qp(q, at, m::state | m::sq_psn);

  std::vector<unsigned char> buf(4096);
  B::mr mr = B::reg_mr(pd, buf.data(), buf.size(), access::local_write);
  ah_attr av;
  av.port_num = d.port;
  av.dlid = d.pa.lid;
  av.is_global = true;
  av.grh.dgid = d.sgid.value;
  av.grh.sgid_index = static_cast<std::uint8_t>(d.gid_index);
  av.grh.hop_limit = 1;
  B::ah ah = B::create_ah(pd, av);

  REQUIRE(B::req_notify_cq(cq, false) == 0);
  B::cq got{};
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(B::get_cq_event(ch, std::chrono::milliseconds(50), got) == ETIMEDOUT);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(45));
  CHECK(B::get_cq_event(ch, std::chrono::milliseconds(0), got) == ETIMEDOUT);

  ibv_sge rs{}, ss{};
  B::set_sge(rs, reinterpret_cast<std::uintptr_t>(buf.data()), 2048, B::mr_lkey(mr));
  ibv_recv_wr rwr{};
  B::set_recv(rwr, 1, &rs, 1);
  ibv_recv_wr* bad_r = nullptr;
  REQUIRE(B::post_recv(q, &rwr, &bad_r) == 0);
  std::memcpy(buf.data() + 2048, "ud!", 4);
  B::set_sge(ss, reinterpret_cast<std::uintptr_t>(buf.data()) + 2048, 4, B::mr_lkey(mr));
  ibv_send_wr swr{};
  B::set_send(swr, 2, opcode::send, send_flags::signaled, &ss, 1);
  B::set_ud(swr, ah, B::qp_num(q), default_qkey);
  ibv_send_wr* bad_s = nullptr;
  REQUIRE(B::post_send(q, &swr, &bad_s) == 0);

  CHECK(B::get_cq_event(ch, std::chrono::seconds(5), got) == 0);
  CHECK(got == cq);
  B::ack_cq_events(cq, 1);
  REQUIRE(B::req_notify_cq(cq, false) == 0);
  std::vector<ibv_wc> wcs;
  REQUIRE(wait_for(cq, wcs, 2));
  const ibv_wc* r = find_wc(wcs, 1);
  REQUIRE(r);
  CHECK(B::get_status(*r) == wc_status::success);
  CHECK(B::get_byte_len(*r) == grh_bytes + 4);
  CHECK(has_all(B::get_wc_flags(*r), wc_flags::grh));
  CHECK(B::get_src_qp(*r) == B::qp_num(q));
  CHECK(std::memcmp(buf.data() + grh_bytes, "ud!", 4) == 0);
  // Drain a possible second event so the CQ can be destroyed.
  if (B::get_cq_event(ch, std::chrono::milliseconds(10), got) == 0) B::ack_cq_events(cq, 1);

  CHECK(B::destroy_ah(ah) == 0);
  CHECK(B::destroy_qp(q) == 0);
  CHECK(B::dereg_mr(mr) == 0);
  CHECK(B::destroy_cq(cq) == 0);
  CHECK(B::destroy_comp_channel(ch) == 0);
  CHECK(B::dealloc_pd(pd) == 0);
}
