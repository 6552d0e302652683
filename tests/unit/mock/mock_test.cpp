// The mock backend type (mock.hpp): the concept, device opening, destroy rules,
// async events, and two threads driving the two ends of a connection.
#include "harness.hpp"
#include "../../sanitized.hpp"

#include <rdmakit/backends/mock.hpp>
#include <rdmakit/backends/mock/objects.hpp>  // fabric::state(): the CM's port counter set

#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>
#include <mutex>
#include <string>
#include <thread>

using namespace conf;
using B = rdmakit::backends::mock;
namespace rm = rdmakit::mock;
using fx_t = fixture<B>;

static_assert(rdmakit::verbs_backend<B>);
static_assert(B::name == "mock");

TEST_CASE("mock: open_device by name, the empty name opens the first device, unknown names are ENODEV") {
  rm::fabric f;
  auto first = B::open_device(f, "");
  CHECK(B::device_name(first) == "mock0");
  auto second = B::open_device(f, "mock1");
  CHECK(B::device_name(second) == "mock1");
  CHECK(errno_of([&] { B::open_device(f, "mlx5_0"); }) == ENODEV);
  B::close_device(second);
  B::close_device(first);
}

TEST_CASE("mock: reg_mr refuses what ibv_reg_mr refuses") {
  fx_t fx;
  std::vector<std::uint64_t> mem(16);
  CHECK(errno_of([&] { B::reg_mr(fx.pd, mem.data(), 128, acc::remote_write); }) == EINVAL);   // needs LOCAL_WRITE
  CHECK(errno_of([&] { B::reg_mr(fx.pd, mem.data(), 128, acc::remote_atomic); }) == EINVAL);  // needs LOCAL_WRITE
  CHECK(errno_of([&] { B::reg_mr(fx.pd, mem.data(), 0, acc::local_write); }) == EINVAL);
  CHECK(errno_of([&] { B::reg_mr(fx.pd, nullptr, 128, acc::local_write); }) == EINVAL);
  auto& ok = fx.make_buffer(128, acc::remote_read);  // remote read alone is fine
  CHECK(ok.lkey() != 0);
}

// A device pins a writable registration's pages for writing (ib_umem_get with FOLL_WRITE),
// which fails on read-only memory: ibv_reg_mr returns EFAULT (an mmap(PROT_READ)ed file,
// a const table registered with the usual LOCAL_WRITE). The mock registered it.
TEST_CASE("mock: reg_mr with a write right refuses read-only memory (EFAULT); without one it registers it") {
  fx_t fx;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* m = ::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  auto* base = static_cast<char*>(m);
  REQUIRE(::mprotect(base + page, page, PROT_READ) == 0);  // the middle page read-only
  for (auto a : {acc::local_write, acc::local_write | acc::remote_write, acc::local_write | acc::remote_atomic})
    CHECK(errno_of([&] { B::reg_mr(fx.pd, base, 3 * page, a); }) == EFAULT);
  CHECK(errno_of([&] { B::reg_mr(fx.pd, base + page + 8, 16, acc::local_write); }) == EFAULT);
  auto ro = B::reg_mr(fx.pd, base + page, page, acc::remote_read);  // read rights only: fine
  CHECK(B::dereg_mr(ro) == 0);
  auto rw = B::reg_mr(fx.pd, base + 2 * page, page, acc::local_write);  // the writable page: fine
  CHECK(B::dereg_mr(rw) == 0);
  ::munmap(base, 3 * page);
}

// Memory the process cannot read (PROT_NONE) registered with read rights only: the mock
// copies what a WR sends with the CPU, and a WRITE from it killed the process inside
// qp.post() (SIGSEGV; audit 48). It is refused at registration, EFAULT naming it, and the
// message for a write right no longer calls such memory read-only (it advised exactly
// that registration). (rxe 6.1 registers it and sends the pages' bytes: docs/mock.md.)
TEST_CASE("mock: reg_mr refuses memory the process cannot read (PROT_NONE), whatever the rights") {
  fx_t fx;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* m = ::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  auto* base = static_cast<char*>(m);
  REQUIRE(::mprotect(base + 2 * page, page, PROT_NONE) == 0);  // the last page unreadable
  for (auto a : {acc::remote_read, acc::local_write, acc::local_write | acc::remote_write})
    CHECK(errno_of([&] { B::reg_mr(fx.pd, base, 3 * page, a); }) == EFAULT);
  CHECK_THROWS_WITH(B::reg_mr(fx.pd, base + 2 * page + 8, 16, acc::remote_read),
                    doctest::Contains("memory the process cannot read"));
  CHECK_THROWS_WITH(B::reg_mr(fx.pd, base, 3 * page, acc::local_write), doctest::Contains("cannot read"));
  auto rw = B::reg_mr(fx.pd, base, 2 * page, acc::local_write);  // the readable pages: fine
  CHECK(B::dereg_mr(rw) == 0);
  ::munmap(base, 3 * page);
}

// The rxe profile rounds an SRQ up to its ring's 2^k - 1 receives, doubling a 32-bit
// count: with max_srq_wr raised past 2^31 (as the mock's limit errors invite) the count
// wrapped to 0 and create_srq never returned, and at max_wr 2^32 - 1 the SRQ took one
// receive while max_wr said 4294967295 (audit 48).
TEST_CASE("mock: an rxe-profile SRQ of more than 2^31 receives is made, its ring counted in 64 bits") {
  rm::fabric_config cfg;
  cfg.profile = rm::device_profile::rxe;
  cfg.devices = rm::default_devices();
  cfg.devices[0].limits.max_srq_wr = 0xffffffffu;
  fx_t fx(cfg);
  for (const std::uint32_t max_wr : {(1u << 31) + 1, 0xffffffffu}) {
    CAPTURE(max_wr);
    srq_attr attr{.max_wr = max_wr, .max_sge = 1};
    auto s = B::create_srq(fx.pd, attr);
    CHECK(B::query_srq(s).max_wr == 0xffffffffu);  // a ring of 2^32 slots, one kept empty
    CHECK(B::destroy_srq(s) == 0);
  }
}

// With every file descriptor taken, the mock made a completion channel and opened a
// device with descriptor -1 (its eventfd refused), and the failure came later from the
// event loop as "epoll_ctl: registering descriptor -1" (EBADF), naming neither the cause
// nor the object (audit 48). The verb fails at once, with the errno eventfd gave.
// (Not under a sanitizer: its runtime needs descriptors of its own, UBSan's checks a pipe.)
TEST_CASE("mock: out of file descriptors, create_comp_channel and open_device fail with EMFILE, naming why") {
#if !defined(RDMAKIT_TEST_SANITIZED)
  fx_t fx;
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
  std::vector<int> taken;
  const auto release = [&] {
    for (int fd : taken) ::close(fd);
    taken.clear();
    ::setrlimit(RLIMIT_NOFILE, &old);
  };
  rlimit low = old;
  low.rlim_cur = 256;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  for (int fd; (fd = ::dup(0)) >= 0;) taken.push_back(fd);  // every descriptor below the limit
  const int channel_err = errno_of([&] { (void)B::create_comp_channel(fx.ctx); });
  std::string says;
  try {
    (void)B::create_comp_channel(fx.ctx);
  } catch (const std::exception& e) {
    says = e.what();
  }
  const int open_err = errno_of([&] { (void)B::open_device(fx.scope().fabric, "mock0"); });
  release();
  CHECK(channel_err == EMFILE);
  CHECK(says.find("file descriptor") != std::string::npos);
  CHECK(open_err == EMFILE);
  auto ch = B::create_comp_channel(fx.ctx);  // descriptors back: fine
  CHECK(B::destroy_comp_channel(ch) == 0);
#endif
}

// A device limit of 0 (iWARP devices report max_ah 0) was refused as a full table: "0
// address handles exist on d already: destroy one first" (audit 48).
TEST_CASE("mock: an object a device supports none of (a limit of 0) is refused as such, not as a full table") {
  rm::fabric_config cfg;
  cfg.devices = rm::default_devices();
  cfg.devices[0].limits.max_ah = 0;
  fx_t fx(cfg);
  CHECK_THROWS_WITH(B::create_ah(fx.pd, fx.loopback_av()), doctest::Contains("mock0 supports no address handles (its max_ah is 0)"));
}

// PATH_MTU above the active MTU of the ports (the classic hard-coded IBV_MTU_4096 on a
// 1500-byte RoCE link, active MTU 1024): a packet longer than a link's MTU is dropped, so
// messages up to the active MTU go through and longer ones are lost (RC: RETRY_EXC_ERR;
// a READ's response packets are sized by the responder's PATH_MTU). The mock carried
// them. (Not a conformance case: rxe's loopback skips the netdev and its MTU.)
TEST_CASE("mock: PATH_MTU above the ports' active MTU loses every message longer than the active MTU") {
  fx_t fx;
  REQUIRE(fx.port.active_mtu == mtu::mtu_1024);
  link_opts big;
  big.path_mtu = mtu::mtu_4096;
  big.timeout = 1;
  big.retry_cnt = 1;
  auto& src = fx.make_buffer(4096);
  auto& dst = fx.make_buffer(4096);
  src.fill(4);
  SUBCASE("RC WRITE") {
    auto [a, b] = fx.make_pair({}, big, big);
    REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, src.sge(0, 1024), dst.addr(), dst.rkey()) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    REQUIRE(fx.post_rdma(a, 2, opcode::rdma_write, src.sge(0, 1025), dst.addr(2048), dst.rkey()) == 0);
    CHECK(fx.poll_one(a.send_cq, "retry exceeded").status == wc_status::retry_exc_err);
    CHECK(dst.zero(2048, 1025));
  }
  SUBCASE("RC READ: the responder's PATH_MTU sizes its response") {
    link_opts fine;  // the requester's 1024 is not what sizes the response
    fine.timeout = 1;
    fine.retry_cnt = 1;
    auto [a, b] = fx.make_pair({}, fine, big);
    REQUIRE(fx.post_rdma(a, 1, opcode::rdma_read, dst.sge(0, 2048), src.addr(), src.rkey()) == 0);
    CHECK(fx.poll_one(a.send_cq, "retry exceeded").status == wc_status::retry_exc_err);
  }
  SUBCASE("UC WRITE: completes, nothing lands") {
    auto [a, b] = fx.make_pair({.type = qp_type::uc}, big, big);
    REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, src.sge(0, 2048), dst.addr(), dst.rkey()) == 0);
    CHECK(fx.poll_one(a.send_cq).status == wc_status::success);
    CHECK(fx.drain(b.recv_cq, 3).empty());
    CHECK(dst.zero(0, 2048));
  }
}

// ibv_reg_mr cannot pin pages that are not mapped (EFAULT); the mock registered them,
// then touched the hole itself (SEGV) when a WRITE named the region.
TEST_CASE("mock: reg_mr refuses a range that is not all mapped memory, as ibv_reg_mr does (EFAULT)") {
  fx_t fx;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* m = ::mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  auto* base = static_cast<char*>(m);
  REQUIRE(::munmap(base + 2 * page, page) == 0);  // a hole in the third page
  CHECK(errno_of([&] { B::reg_mr(fx.pd, base, 4 * page, acc::local_write); }) == EFAULT);
  CHECK(errno_of([&] { B::reg_mr(fx.pd, base + page + 10, page, acc::local_write); }) == EFAULT);  // ends in it
  auto mr = B::reg_mr(fx.pd, base, 2 * page, acc::local_write);  // the mapped part is fine
  CHECK(B::dereg_mr(mr) == 0);
  ::munmap(base, 2 * page);
  ::munmap(base + 3 * page, page);
}

TEST_CASE("mock: create_qp refuses CQs of another device") {
  fx_t fx;
  auto other = B::open_device(fx.scope().fabric, "mock1");
  auto cq = B::create_cq(other, 8, {}, 0);
  qp_cap caps{4, 4, 1, 1, 0};
  CHECK(errno_of([&] { B::create_qp(fx.pd, cq, cq, qp_type::rc, caps, true); }) == EINVAL);
  CHECK(B::destroy_cq(cq) == 0);
  B::close_device(other);
}

// A capacity above the device's limit named the limit but not what to do (audit 19, F5).
TEST_CASE("mock: create_qp above a device limit says what to ask for, and which mock limit to raise") {
  fx_t fx;
  auto cq = B::create_cq(fx.ctx, 64, {}, 0);
  const auto max_inline = B::query_device(fx.ctx).max_inline_data;
  qp_cap caps{4, 4, 1, 1, max_inline + 1};
  try {
    B::create_qp(fx.pd, cq, cq, qp_type::rc, caps, true);
    FAIL("created");
  } catch (const rdmakit::verbs_error& e) {
    CHECK(e.errno_value() == EINVAL);
    const std::string what = e.what();
    CHECK(what.find("max_inline_data " + std::to_string(max_inline + 1) + " exceeds") != std::string::npos);
    CHECK(what.find("ask for at most " + std::to_string(max_inline)) != std::string::npos);
    CHECK(what.find("device_config::limits.max_inline_data") != std::string::npos);
  }
  CHECK(B::destroy_cq(cq) == 0);
}

TEST_CASE("mock: cm_migrate_id onto the id's own channel keeps its events; another fabric's channel is EINVAL") {
  rm::fabric f;
  auto ctx = B::open_device(f, "mock0");
  auto ch = B::cm_create_channel(ctx);
  auto id = B::cm_create_id(ch);
  B::cm_resolve_addr(id, {}, rdmakit::cm_address::parse("10.0.0.2", 7471), std::chrono::milliseconds(100));
  B::cm_migrate_id(id, ch);  // moving its queued event onto the queue being walked never ended
  rm::fabric other;
  auto other_ctx = B::open_device(other, "mock0");
  auto other_ch = B::cm_create_channel(other_ctx);
  CHECK(errno_of([&] { B::cm_migrate_id(id, other_ch); }) == EINVAL);
  rdmakit::basic_cm_event<B::cm_id> ev;
  REQUIRE(B::cm_get_event(ch, std::chrono::milliseconds(0), ev) == 0);
  CHECK(ev.type == rdmakit::cm_event_type::addr_resolved);
  CHECK(ev.id == id);
  CHECK(B::cm_get_event(ch, std::chrono::milliseconds(0), ev) == ETIMEDOUT);  // only the one
  CHECK(B::cm_destroy_id(id) == 0);
  CHECK(B::cm_destroy_channel(ch) == 0);
  CHECK(B::cm_destroy_channel(other_ch) == 0);
  B::close_device(other_ctx);
  B::close_device(ctx);
}

// The CM's ephemeral ports (40000..65535) wrapped past the ports of live ids: after
// 25,536 connections two live active ids of one address could hold one port (audit 26,
// F7). A port a live id holds is skipped, as a listened one is.
TEST_CASE("mock: the CM gives no live id's port again when its ephemeral ports wrap") {
  rm::fabric f;
  auto ctx = B::open_device(f, "mock0");
  auto ch = B::cm_create_channel(ctx);
  const auto to = rdmakit::cm_address::parse("10.0.0.2", 7471);
  auto first = B::cm_create_id(ch);
  B::cm_resolve_addr(first, {}, to, std::chrono::milliseconds(100));
  const std::uint16_t held = B::cm_bound_port(first);
  f.state().next_cm_port = held;  // as 25,536 connections since would leave it
  auto second = B::cm_create_id(ch);
  B::cm_resolve_addr(second, {}, to, std::chrono::milliseconds(100));
  CHECK(B::cm_bound_port(second) != held);
  CHECK(B::cm_bound_port(second) >= 40000);
  for (auto id : {first, second}) CHECK(B::cm_destroy_id(id) == 0);
  CHECK(B::cm_destroy_channel(ch) == 0);
  B::close_device(ctx);
}

TEST_CASE("mock: req_notify_cq on a CQ without a channel is EINVAL") {
  fx_t fx;
  auto cq = fx.make_cq(8);
  CHECK(B::req_notify_cq(cq, false) == EINVAL);
}

TEST_CASE("mock: destroy rules -- objects in use give EBUSY and nothing breaks") {
  fx_t fx;
  auto pd = B::alloc_pd(fx.ctx);
  auto ch = B::create_comp_channel(fx.ctx);
  auto cq = B::create_cq(fx.ctx, 16, ch, 0);
  std::vector<std::uint64_t> mem(64);
  auto mr = B::reg_mr(pd, mem.data(), 512, acc::local_write);
  auto ah = B::create_ah(pd, fx.loopback_av());
  endpoint<B> a, b;
  for (auto* e : {&a, &b}) {
    e->send_cq = e->recv_cq = cq;
    e->caps = {4, 4, 1, 1, 0};
    e->qp = B::create_qp(pd, cq, cq, qp_type::rc, e->caps, true);
    e->num = B::qp_num(e->qp);
  }
  CHECK(B::destroy_cq(cq) == EBUSY);            // QPs use it
  CHECK(B::dealloc_pd(pd) == EBUSY);            // MR, AH and QPs use it
  CHECK(B::destroy_comp_channel(ch) == EBUSY);  // the CQ reports to it

  // An event that is delivered but not acked keeps the CQ alive.
  fx.connect(a, b);
  std::vector<B::sge> s(1);
  B::set_sge(s[0], reinterpret_cast<std::uintptr_t>(mem.data()), 64, B::mr_lkey(mr));
  B::recv_wr rwr{};
  B::set_recv(rwr, 1, s.data(), 1);
  B::recv_wr* rbad = nullptr;
  REQUIRE(B::post_recv(b.qp, &rwr, &rbad) == 0);
  REQUIRE(B::req_notify_cq(cq, false) == 0);
  B::send_wr swr{};
  B::set_send(swr, 2, opcode::send, send_flags::signaled, s.data(), 1);
  B::send_wr* sbad = nullptr;
  REQUIRE(B::post_send(a.qp, &swr, &sbad) == 0);
  B::cq got{};
  REQUIRE(B::get_cq_event(ch, 1000ms, got) == 0);
  CHECK(got == cq);
  CHECK(fx.poll(cq, 2).size() == 2);
  CHECK(B::destroy_qp(a.qp) == 0);
  CHECK(B::destroy_qp(b.qp) == 0);
  CHECK(B::destroy_cq(cq) == EBUSY);  // one event not acked
  B::ack_cq_events(cq, 1);
  CHECK(B::destroy_cq(cq) == 0);
  CHECK(B::destroy_comp_channel(ch) == 0);

  CHECK(B::dealloc_pd(pd) == EBUSY);  // MR and AH
  CHECK(B::dereg_mr(mr) == 0);
  CHECK(B::dealloc_pd(pd) == EBUSY);  // AH
  CHECK(B::destroy_ah(ah) == 0);
  CHECK(B::dealloc_pd(pd) == 0);
}

TEST_CASE("mock: responder errors raise async events on the responder's device") {
  fx_t fx;
  auto [a, b] = fx.make_pair();
  auto& buf = fx.make_buffer(64);
  REQUIRE(fx.post_rdma(a, 1, opcode::rdma_write, buf.sge(0, 8), buf.addr(8), buf.rkey() ^ 0x2200) == 0);
  CHECK(fx.poll_one(a.send_cq).status == wc_status::rem_access_err);
  async_event ev;
  REQUIRE(B::get_async_event(fx.ctx, 100ms, ev) == 0);
  CHECK(ev.type == async_event_type::qp_access_err);
  CHECK(ev.qp_num == b.num);
  CHECK(ev.object == static_cast<const void*>(b.qp));
  CHECK(B::query_qp_state(b.qp) == qp_state::err);
  CHECK(B::get_async_event(fx.ctx, 10ms, ev) == ETIMEDOUT);
}

TEST_CASE("mock: two threads drive the two ends of an RC connection (10k ping-pongs)") {
  fx_t fx;
  auto pair = fx.make_pair({.caps = {16, 16, 1, 1, 64}});
  const endpoint<B> a = pair.first, b = pair.second;
  auto& abuf = fx.make_buffer(64);
  auto& bbuf = fx.make_buffer(64);
  constexpr std::uint32_t rounds = 10000;

  std::mutex err_mu;
  std::string first_error;
  std::atomic<bool> failed{false};
  auto fail = [&](const std::string& what) {
    std::lock_guard lk(err_mu);
    if (first_error.empty()) first_error = what;
    failed = true;
  };

  // One end: receives a value, re-posts its receive, answers with value + 1.
  auto run = [&](const endpoint<B>& me, const buffer<B>& rb, bool starts) {
    B::sge rs{};
    B::set_sge(rs, rb.addr(0), 8, rb.lkey());
    auto post_recv = [&] {
      B::recv_wr w{};
      B::set_recv(w, 0, &rs, 1);
      B::recv_wr* bad = nullptr;
      if (B::post_recv(me.qp, &w, &bad) != 0) fail("post_recv");
    };
    auto send = [&](std::uint32_t v) {
      B::sge s{};
      B::set_sge(s, reinterpret_cast<std::uintptr_t>(&v), sizeof v, 0);
      B::send_wr w{};
      B::set_send(w, v, opcode::send, send_flags::signaled | send_flags::inline_data, &s, 1);
      B::send_wr* bad = nullptr;
      if (int rc = B::post_send(me.qp, &w, &bad)) fail("post_send: " + std::to_string(rc));
    };
    auto wait = [&]() -> std::uint32_t {
      B::wc w[4];
      const auto deadline = std::chrono::steady_clock::now() + 60s;
      while (!failed) {
        int ns = B::poll_cq(me.send_cq, 4, w);
        for (int i = 0; i < ns; ++i)
          if (B::get_status(w[i]) != wc_status::success) fail(std::string("send: ") + to_string(B::get_status(w[i])));
        if (B::poll_cq(me.recv_cq, 1, w) == 1) {
          if (B::get_status(w[0]) != wc_status::success) fail("recv status");
          std::uint32_t v;
          std::memcpy(&v, rb.data(), sizeof v);
          post_recv();
          return v;
        }
        if (std::chrono::steady_clock::now() > deadline) fail("timed out");
        std::this_thread::yield();
      }
      return ~0u;
    };
    post_recv();
    if (starts) send(0);
    for (std::uint32_t k = 0; k < rounds && !failed; ++k) {
      const std::uint32_t v = wait();
      const std::uint32_t want = starts ? 2 * k + 1 : 2 * k;
      if (v != want) fail("got " + std::to_string(v) + ", expected " + std::to_string(want));
      if (!starts || k + 1 < rounds) send(v + 1);
    }
  };

  // Both receives are posted before either side sends: start B first, then A.
  std::thread tb([&] { run(b, bbuf, false); });
  std::this_thread::sleep_for(10ms);
  std::thread ta([&] { run(a, abuf, true); });
  ta.join();
  tb.join();
  CHECK_MESSAGE(!failed, first_error);
}

TEST_CASE("mock: an INIT→RTR refused for its address vector names the verb and the errno once") {
  fx_t fx;
  auto e = fx.make_qp();
  fx.to_init(e);
  link_opts l;
  ah_attr av = fx.loopback_av();
  av.grh.sgid_index = 5;  // an empty slot of the GID table
  l.av = av;
  try {
    fx.to_rtr(e, e.num, l);
    FAIL("INIT→RTR with an empty GID slot");
  } catch (const rdmakit::verbs_error& err) {
    const std::string w = err.what();
    CHECK(w.find("sgid_index 5") != std::string::npos);
    auto count = [&](const std::string& s) {
      std::size_t n = 0;
      for (auto p = w.find(s); p != std::string::npos; p = w.find(s, p + 1)) ++n;
      return n;
    };
    CHECK(count("(ENODATA)") == 1);  // the kernel's GID table lookup (rxe, observed: audit 36)
    CHECK(count("ibv_modify_qp") == 1);
  }
}

// rxe refuses INIT→RTR with an all-zero destination GID, or an address vector leaving
// from a port the device does not have (the kernel checks the AV's port); the mock took
// both, ignoring the AV's port (audit 36, D6).
TEST_CASE("mock: INIT→RTR with an all-zero destination GID, or from a port that does not exist, is EINVAL") {
  fx_t fx;
  auto e = fx.make_qp();
  fx.to_init(e);
  for (const bool zero_gid : {true, false}) {
    CAPTURE(zero_gid);
    link_opts l;
    ah_attr av = fx.loopback_av();
    if (zero_gid)
      av.grh.dgid = gid{};
    else
      av.port_num = 2;
    l.av = av;
    try {
      fx.to_rtr(e, e.num, l);
      FAIL("INIT→RTR with a bad address vector");
    } catch (const rdmakit::verbs_error& err) {
      CHECK(err.errno_value() == EINVAL);
      CHECK(std::string(err.what()).find(zero_gid ? "grh.dgid is all zeros" : "av.port_num 2") != std::string::npos);
    }
    CHECK(B::query_qp_state(e.qp) == qp_state::init);
  }
}

// rxe looks a SEND_WITH_INV's rkey up in the receiving device's pool only (any PD of it:
// mw.send_inv_other_pd); the mock's windows are indexed fabric-wide, so the receiving
// QP's device must be checked: a SEND_WITH_INV received on mock0 naming a type 2 window
// of mock1 fails (REM_INV_REQ_ERR, as an rkey rxe does not find) and leaves it bound.
TEST_CASE("mock: a SEND_WITH_INV received on one device never invalidates a window of another") {
  for (const auto profile : {rm::device_profile::spec, rm::device_profile::rxe}) {
    CAPTURE(static_cast<int>(profile));
    rm::fabric_config cfg;
    cfg.profile = profile;
    fx_t fx(cfg);
    auto ctx1 = B::open_device(fx.scope().fabric, "mock1");
    fx.on_cleanup([ctx1] { B::close_device(ctx1); });
    auto pd1 = B::alloc_pd(ctx1);
    fx.on_cleanup([pd1] { CHECK(B::dealloc_pd(pd1) == 0); });
    auto cq1 = B::create_cq(ctx1, 64, {}, 0);
    fx.on_cleanup([cq1] { CHECK(B::destroy_cq(cq1) == 0); });
    // mock1's address, for the QPs of mock0 (those of mock1 take the default, mock0's).
    link_opts to1;
    ah_attr av1 = fx.loopback_av();
    av1.grh.dgid = B::query_gid(ctx1, fx.port_num, fx.gid_index).value;
    av1.dlid = B::query_port(ctx1, fx.port_num).lid;
    to1.av = av1;
    const auto cross = [&](const endpoint<B>& on0, const endpoint<B>& on1) {
      fx.bring_up(on0, on1.num, to1);
      fx.bring_up(on1, on0.num);
    };
    auto y = fx.make_qp({}, cq1, cq1, pd1);   // mock1: the window is bound through it
    auto x2 = fx.make_qp();                   // mock0: writes through the window
    auto z = fx.make_qp({}, cq1, cq1, pd1);   // mock1: sends the SEND_WITH_INV
    auto x = fx.make_qp();                    // mock0: receives it
    cross(x2, y);
    cross(x, z);
    auto& src = fx.make_buffer(256);
    auto& inbox = fx.make_buffer(256);
    auto& zsrc = fx.make_buffer(256, access::local_write, pd1);
    auto& region = fx.make_buffer(4096, access::local_write | access::remote_write | access::mw_bind, pd1);
    auto w = B::alloc_mw(pd1, mw_type::type2);
    fx.on_cleanup([w] { CHECK(B::dealloc_mw(w) == 0); });
    const std::uint32_t rkey = (B::mw_rkey(w) & ~0xFFu) | ((B::mw_rkey(w) + 1) & 0xFFu);
    REQUIRE(fx.post_send(y, 70, opcode::bind_mw, {}, send_flags::signaled, [&](B::send_wr& wr) {
      B::set_bind_mw(wr, w, rkey, region.mr, region.addr(0), 4096, access::remote_write);
    }) == 0);
    REQUIRE(fx.poll_one(cq1, "the bind").status == wc_status::success);
    REQUIRE(fx.post_rdma(x2, 1, opcode::rdma_write, src.sge(0, 64), region.addr(0), rkey) == 0);
    REQUIRE(fx.poll_one(x2.send_cq, "a WRITE through the window").status == wc_status::success);

    REQUIRE(fx.post_recv(x, 80, {inbox.sge(0, 256)}) == 0);
    REQUIRE(fx.post_send(z, 2, opcode::send_with_inv, {zsrc.sge(0, 32)}, send_flags::signaled,
                         [&](B::send_wr& wr) { B::set_invalidate(wr, rkey); }) == 0);
    const auto got = fx.poll_one(x.recv_cq, "the SEND_WITH_INV's receive");
    CHECK(got.wr_id == 80);
    CHECK(got.status == wc_status::rem_inv_req_err);
    // (rxe acknowledges a SEND_WITH_INV whose rkey it cannot invalidate: mw.send_inv_region_rkey)
    CHECK(fx.poll_one(cq1, "the SEND_WITH_INV's completion").status ==
          (profile == rm::device_profile::rxe ? wc_status::success : wc_status::rem_inv_req_err));

    REQUIRE(fx.post_rdma(x2, 3, opcode::rdma_write, src.sge(0, 64), region.addr(64), rkey) == 0);
    CHECK(fx.poll_one(x2.send_cq, "a WRITE through the window, still bound").status == wc_status::success);
  }
}

TEST_CASE("mock: a failed or flushed receive completes with opcode SEND, as rxe's: status() comes first") {
  // ibv_poll_cq(3) leaves the opcode of a failed completion undefined, and rxe 6.1 reports
  // IBV_WC_SEND (0) for a receive that failed or was flushed. A mock that said RECV would
  // hide a program that dispatches on the opcode before it looks at the status.
  for (const auto profile : {rm::device_profile::spec, rm::device_profile::rxe}) {
    CAPTURE(static_cast<int>(profile));
    rm::fabric_config cfg;
    cfg.profile = profile;
    fx_t fx(cfg);
    auto [a, b] = fx.make_pair();
    auto& buf = fx.make_buffer(256);
    // Too small: the receive fails (LOC_LEN_ERR, rxe LOC_QP_OP_ERR) and b goes to ERR.
    REQUIRE(fx.post_recv(b, 10, {buf.sge(128, 8)}) == 0);
    REQUIRE(fx.post_recv(b, 11, {buf.sge(128, 64)}) == 0);
    REQUIRE(fx.post_send(a, 1, opcode::send, {buf.sge(0, 32)}) == 0);
    const auto failed = fx.poll_one(b.recv_cq, "the receive too small");
    CHECK(failed.wr_id == 10);
    CHECK(failed.status != wc_status::success);
    CHECK(failed.op == wc_opcode::send);
    const auto flushed = fx.poll_one(b.recv_cq, "the receive flushed behind it");
    CHECK(flushed.wr_id == 11);
    CHECK(flushed.status == wc_status::wr_flush_err);
    CHECK(flushed.op == wc_opcode::send);
  }
}
