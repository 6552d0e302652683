#include "fixture.hpp"

#include <rdmakit/device_events.hpp>
#include <rdmakit/event_loop.hpp>

#include <atomic>
#include <optional>
#include <thread>

using namespace policy_test;

TEST_CASE("device: open by name, or the first one with an empty name") {
  mock::fabric fab;
  CHECK(device<B>::names(fab) == std::vector<std::string>{"mock0", "mock1"});
  device<B> d1(fab, "mock1");
  CHECK(d1.name() == "mock1");
  device<B> first(fab, "");
  CHECK(first.name() == "mock0");
  CHECK(d1.attr().max_qp_wr > 0);
  device<B> moved = std::move(d1);
  CHECK(moved.name() == "mock1");
  CHECK_FALSE(static_cast<bool>(d1));
}

TEST_CASE("device: an unknown name says which devices exist") {
  mock::fabric fab;
  try {
    device<B> d(fab, "mlx5_7");
    FAIL("opened a device that does not exist");
  } catch (const verbs_error& e) {
    CHECK(e.errno_value() == ENODEV);
    std::string w = e.what();
    CHECK(w.find("mlx5_7") != std::string::npos);
    CHECK(w.find("mock0, mock1") != std::string::npos);
  }
}

TEST_CASE("device: ports and GIDs") {
  mock::fabric fab;
  device<B> d(fab, "mock0");
  auto p = d.port(1);
  CHECK(p.state == port_state::active);
  CHECK(p.layer == link_layer::ethernet);
  CHECK_THROWS_AS(d.port(2), usage_error);
  auto gids = d.gids(1);
  REQUIRE(gids.size() >= 2);
  CHECK(gids[0].value.is_link_local());
  CHECK(d.default_gid_index(1) == 1);
  CHECK(d.gid(1, 1).value == gid::from_ipv4(10, 0, 0, 1));
}

TEST_CASE("device: InfiniBand ports use GID index 0 and LIDs") {
  mock::fabric fab(two_ib_devices());
  side x(fab, "ib0"), y(fab, "ib1");
  CHECK(x.dev.default_gid_index() == 0);
  CHECK(x.dev.port().lid != 0);
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  CHECK(p.a.local_endpoint().lid == x.dev.port().lid);
  auto mr = x.pd.allocate<rw_access>(64);
  auto mr2 = y.pd.allocate<rw_access>(64);
  REQUIRE(p.b.post_recv(mr2.local(), 1).ok());
  REQUIRE(p.a.send(mr.local(0, 8), 2).ok());
  auto s = collect(y.cq, 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].status == wc_status::success);
}

// A negative timeout went to the backend, where it means no limit: next_event waited for
// ever, where every other wait of rdmakit (completion_queue::wait, device_events::next)
// takes it as none. Passing `deadline - steady_clock::now()` (any duration since the
// timeout is a detail::ms_timeout) hung once the deadline had passed.
TEST_CASE("device::next_event: a negative timeout does not wait (a deadline already past), not for ever") {
  mock::fabric fab;
  device<B> dev(fab, "mock0");
  for (const detail::ms_timeout t : {detail::ms_timeout(std::chrono::milliseconds(-5)),
                                     detail::ms_timeout(std::chrono::steady_clock::now() - std::chrono::hours(1) -
                                                        std::chrono::steady_clock::now()),
                                     detail::ms_timeout(std::chrono::hours::min())}) {
    CAPTURE(t.count());
    std::atomic<bool> returned{false};
    std::optional<async_event> got;
    std::thread reader([&] {
      got = dev.next_event(t);
      returned = true;
    });
    for (int i = 0; i < 200 && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const bool at_once = returned;
    if (!at_once) fab.set_port_up("mock0", 1, false);  // wakes it
    reader.join();
    CHECK(at_once);
    CHECK_FALSE(got.has_value());
    if (!at_once) {
      fab.set_port_up("mock0", 1, true);
      while (dev.next_event(std::chrono::milliseconds(10))) {
      }
    }
  }
}

TEST_CASE("device::next_event: port down/up and a CQ overflow arrive through the device; none is nullopt") {
  mock::fabric fab;
  device<B> dev(fab, "mock0");
  CHECK_FALSE(dev.next_event(std::chrono::milliseconds(1)).has_value());
  fab.set_port_up("mock0", 1, false);
  auto down = dev.next_event(std::chrono::milliseconds(100));
  REQUIRE(down.has_value());
  CHECK(down->type == async_event_type::port_err);
  CHECK(down->port_num == 1);
  fab.set_port_up("mock0", 1, true);
  auto up = dev.next_event(std::chrono::milliseconds(100));
  REQUIRE(up.has_value());
  CHECK(up->type == async_event_type::port_active);

  // A CQ overflow is a CQ_ERR naming that CQ: post to a CQ nobody polls, from the
  // backend directly (the typed layer refuses QPs their CQ cannot hold).
  auto pd = dev.create_pd();
  auto cq = dev.create_cq(1);
  auto mr = pd.allocate<rw_access>(64);
  qp_cap caps{4, 4, 1, 1, 0};
  auto raw = B::create_qp(pd.native(), cq.native(), cq.native(), qp_type::ud, caps, true);
  qp_attr a;
  a.state = qp_state::init;
  a.port_num = 1;
  a.qkey = default_qkey;
  B::modify_qp(raw, a, qp_attr_mask::state | qp_attr_mask::pkey_index | qp_attr_mask::port | qp_attr_mask::qkey);
  a = {};
  a.state = qp_state::rtr;
  B::modify_qp(raw, a, qp_attr_mask::state);
  a.state = qp_state::rts;
  a.sq_psn = 0;
  B::modify_qp(raw, a, qp_attr_mask::state | qp_attr_mask::sq_psn);
  auto ah = pd.create_ah(endpoint{0, B::qp_num(raw), 0, dev.gid(1, dev.default_gid_index(1)).value, mtu::mtu_1024});
  for (std::uint64_t i = 0; i < 2; ++i) {
    B::sge s;
    B::set_sge(s, mr.local().addr, 8, mr.local().lkey);
    B::send_wr w;
    B::set_send(w, i, opcode::send, send_flags::signaled, &s, 1);
    B::set_ud(w, ah.native(), 1, default_qkey);  // to QP 1: nobody; the send completes locally
    B::send_wr* bad = nullptr;
    (void)B::post_send(raw, &w, &bad);
  }
  auto err = dev.next_event(std::chrono::milliseconds(100));
  REQUIRE(err.has_value());
  CHECK(err->type == async_event_type::cq_err);
  CHECK(err->object == static_cast<const void*>(cq.native()));
  B::destroy_qp(raw);
}

TEST_CASE("device::next_event: a responder's QP_ACCESS_ERR wakes a thread already waiting for it") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto src = x.pd.allocate<rw_access>(64);
  auto dst = y.pd.allocate<rw_access>(64);
  std::optional<async_event> got;
  std::chrono::steady_clock::duration waited{};
  std::atomic<bool> waiting{false};
  std::thread waiter([&] {
    waiting = true;
    const auto t0 = std::chrono::steady_clock::now();
    got = y.dev.next_event(std::chrono::seconds(5));
    waited = std::chrono::steady_clock::now() - t0;
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the waiter is asleep in next_event
  auto wrong = remote_region<access::remote_write>::unchecked(dst.remote().addr(), dst.remote().rkey() ^ 1, 64);
  REQUIRE(p.a.write(src.local(), wrong, 1).ok());
  REQUIRE(collect(x.cq, 1).size() == 1);
  waiter.join();
  REQUIRE(got.has_value());
  CHECK(got->type == async_event_type::qp_access_err);
  CHECK(waited < std::chrono::seconds(4));  // woken by the event, not by its timeout
}

// librdmacm lends one context per device (backends::rdmacm): two device objects of one
// device read one queue of asynchronous events, but each kept its own record of readers,
// so a device_events on one and next_event() on the other were both accepted and each
// event went to whichever read first (seen on rxe, found by an audit). Such device
// objects now share one state: one reader, one record of the device's windows.
TEST_CASE("device: objects of a backend that lends one context per device share its event reader and windows") {
  using R = shared_context_mock;
  mock::fabric_config cfg;
  cfg.profile = mock::device_profile::rxe;  // a peer's send_inv revokes a window of any PD of the device
  mock::fabric fab(cfg);
  basic_side<R> x(fab, "mock0"), y(fab, "mock1"), y2(fab, "mock1");  // y and y2: one context
  REQUIRE(y.dev.native() == y2.dev.native());
  SUBCASE("a device_events on one object refuses next_event() on the other") {
    event_loop loop;
    device_events<R> events(loop, y.dev);
    CHECK_THROWS_WITH_AS((void)y2.dev.next_event(), doctest::Contains("a device_events awaits"), usage_error);
  }
  SUBCASE("a peer's send_inv polled on the other object's CQ makes invalidate() refuse") {
    constexpr auto window_region = all_access | access::mw_bind;
    auto region = y.pd.allocate<window_region>(256);
    auto inbox = y2.pd.allocate<access::local_write>(64);
    auto src = x.pd.allocate<all_access>(64);
    auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1, 0});
    auto q = make_pair<rc>(x.pd, x.cq, y2.pd, y2.cq, qp_cap{16, 16, 1, 1, 0});
    auto w = y.pd.alloc_window<access::remote_write>();
    REQUIRE(w.bind(p.b, region, 0, 256, 1).ok());
    REQUIRE(collect(y.cq, 1).size() == 1);
    REQUIRE(q.b.post_recv(inbox.local(), 2).ok());
    REQUIRE(q.a.post(op::send_inv{src.local(0, 4), w.remote()}, 3).ok());
    REQUIRE(collect(x.cq, 1).size() == 1);
    REQUIRE(collect(y2.cq, 1).size() == 1);
    CHECK_THROWS_WITH_AS((void)w.invalidate(p.b, 4), doctest::Contains("send_inv invalidated"), usage_error);
  }
}

// The registry of shared states was a static std::vector, destroyed at exit before a
// device object of static storage duration made earlier: that object's destructor then
// removed itself from the freed vector (heap-use-after-free under ASan, at this
// program's exit; found by an audit). The registry is a list through the states now,
// whose head is a pointer: nothing of it is destroyed.
namespace {
mock::fabric exit_fabric;
device<shared_context_mock> exit_device(exit_fabric, "mock0");  // destroyed after main
}  // namespace

TEST_CASE("device: an object of static storage duration on a backend that lends contexts shares and outlives main") {
  device<shared_context_mock> local(exit_fabric, "mock0");
  CHECK(local.native() == exit_device.native());
}
