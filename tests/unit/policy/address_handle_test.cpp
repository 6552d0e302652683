#include "fixture.hpp"

#include <cstring>
#include <optional>
#include <string>

using namespace policy_test;

TEST_CASE("UD: an address handle names the destination; receives start with the 40-byte GRH") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto ah = x.pd.create_ah(p.b.local_endpoint());
  auto dest = ah.to(p.b.qp_num());
  CHECK(dest.qpn() == p.b.qp_num());
  CHECK(dest.qkey() == default_qkey);
  CHECK(dest.native() == ah.native());
  CHECK(dest.live());
  // A QP number past 24 bits was taken, and the datagram went nowhere: refused.
  CHECK_THROWS_WITH_AS(ah.to(p.b.qp_num() | 1u << 24), doctest::Contains("has more than 24 bits"), usage_error);

  auto tx = x.pd.allocate<access::local_write>(256);
  auto rx = y.pd.allocate<access::local_write>(256);
  std::memcpy(tx.data(), "datagram", 8);
  CHECK(p.b.post_recv(rx.local(0, 39), 1).status == post_status::recv_too_small);
  REQUIRE(p.b.post_recv(rx.local(), 2).ok());
  REQUIRE(p.a.send(dest, tx.local(0, 8), 3).ok());
  seen r{};
  int n = 0;
  for (int i = 0; i < 100 && n == 0; ++i) n = y.cq.poll([&](const completion<B>& c) {
    r = copy(c);
    CHECK(c.has_grh());
    CHECK(c.src_qp() == p.a.qp_num());
    CHECK(c.payload_len() == 8);
  });
  REQUIRE(n == 1);
  CHECK(r.status == wc_status::success);
  CHECK(r.byte_len == 48);
  CHECK(r.payload_offset == 40);
  CHECK(std::memcmp(rx.data() + r.payload_offset, "datagram", 8) == 0);

  address_handle<B> moved = std::move(ah);
  CHECK(moved);
  CHECK_FALSE(ah);
}

TEST_CASE("UD: a datagram too large for its receive costs that receive, not the queue pair") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto ah = x.pd.create_ah(p.b.local_endpoint());
  auto tx = x.pd.allocate<access::local_write>(256);
  auto rx = y.pd.allocate<access::local_write>(256);
  REQUIRE(p.b.post_recv(rx.local(0, 40 + 10), 1).ok());  // room for 10 bytes
  REQUIRE(p.a.send(ah.to(p.b.qp_num()), tx.local(0, 100), 2).ok());
  auto got = collect(y.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::loc_len_err);
  CHECK_FALSE(p.b.in_error());  // the device keeps the UD QP in RTS, and so does the layer
  CHECK(p.b.posted_recvs() == 0);
  REQUIRE(p.b.post_recv(rx.local(), 3).ok());
  REQUIRE(p.a.send(ah.to(p.b.qp_num()), tx.local(0, 100), 4).ok());
  got = collect(y.cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(got[0].wr_id == 3);
  auto back = y.pd.create_ah(p.a.local_endpoint());
  CHECK(p.b.send(back.to(p.a.qp_num()), rx.local(0, 8), 5).ok());  // its sends are not refused
}

TEST_CASE("UD: send with immediate data reaches the peer with WITH_IMM") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto ah = x.pd.create_ah(p.b.local_endpoint());
  auto tx = x.pd.allocate<access::local_write>(64);
  auto rx = y.pd.allocate<access::local_write>(128);
  REQUIRE(p.b.post_recv(rx.local(), 1).ok());
  REQUIRE(p.a.send_imm(ah.to(p.b.qp_num()), tx.local(0, 4), 0xCAFE, 2).ok());
  auto s = collect(y.cq, 1);
  REQUIRE(s.size() == 1);
  CHECK(s[0].has_imm);
  CHECK(s[0].imm == 0xCAFEu);
}

TEST_CASE("UD: the endpoint carries the Q_Key, so ah.to(endpoint) reaches a QP with its own Q_Key") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto sender = x.pd.create_qp<ud>(x.cq, qp_cap{8, 8}).activate();
  auto receiver = y.pd.create_qp<ud>(y.cq, qp_cap{8, 8}, {.qkey = 0x2222beef}).activate();
  const endpoint peer = receiver.local_endpoint();
  CHECK(peer.qkey == 0x2222beefu);
  auto ah = x.pd.create_ah(peer);
  auto tx = x.pd.allocate<access::local_write>(64);
  auto rx = y.pd.allocate<access::local_write>(256);
  REQUIRE(receiver.post_recv(rx.local(), 1).ok());
  std::memcpy(tx.data(), "default!peerkey!", 16);
  REQUIRE(sender.send(ah.to(peer.qpn), tx.local(0, 8), 2).ok());  // the default Q_Key: dropped
  REQUIRE(sender.send(ah.to(peer), tx.local(8, 8), 3).ok());      // the peer's: delivered
  (void)collect(x.cq, 2);
  auto got = collect(y.cq, 1, 200);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == wc_status::success);
  CHECK(std::memcmp(rx.data() + got[0].payload_offset, "peerkey!", 8) == 0);
  CHECK(receiver.posted_recvs() == 0);
}

// A ud_address held the native handle: after the handle went, a post read freed memory
// on libibverbs (the provider dereferences it) and a default one posted a null handle.
// Now the address is checked at each post against the handle's record.
TEST_CASE("UD: a send through the address of a destroyed address handle is refused, before the device") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto tx = x.pd.allocate<access::local_write>(256);
  auto rx = y.pd.allocate<access::local_write>(256);
  REQUIRE(p.b.post_recv(rx.local(), 1).ok());
  std::optional<address_handle<B>> ah;
  ah.emplace(x.pd.create_ah(p.b.local_endpoint()));
  const auto dest = ah->to(p.b.local_endpoint());
  ah.reset();
  CHECK_FALSE(dest.live());
  CHECK(dest.native() == B::ah{});
  const post_result r = p.a.send(dest, tx.local(0, 8), 2);
  CHECK(r.status == post_status::stale_address);
  CHECK(std::string(r.message()).find("address_handle") != std::string::npos);
  CHECK(std::string(to_string(r.status)) == "stale_address");
  CHECK(p.a.send_imm(dest, tx.local(0, 8), 7, 3).status == post_status::stale_address);
  CHECK(p.a.post(op::ud_send{tx.local(0, 8), dest}, 4).status == post_status::stale_address);
  CHECK(x.cq.poll() == 0);  // nothing reached the device: no completion, no credit taken
  CHECK(y.cq.poll() == 0);
  CHECK(p.a.send_credits() == 8);
}

// The device's refusal listed "(UD) an address handle that was destroyed" (refused
// before the device since, as stale_address) and not the handle of another PD. Then it
// named five causes (rule unknown), and rxe took the WR and failed the queue pair later
// (LOC_QP_OP_ERR, row ud.ah_other_pd; an audit): the layer refuses it before the
// device now, naming it, single posts and post lists alike.
TEST_CASE("UD: a send through an address handle of another protection domain is refused, saying so") {
  for (auto profile : {mock::device_profile::spec, mock::device_profile::rxe}) {
    CAPTURE(profile == mock::device_profile::rxe);
    mock::fabric_config cfg;
    cfg.profile = profile;
    mock::fabric fab(cfg);
    side x(fab, "mock0"), y(fab, "mock1");
    auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
    auto other_pd = x.dev.create_pd();
    auto ah = other_pd.create_ah(p.b.local_endpoint());
    auto tx = x.pd.allocate<access::local_write>(64);
    const post_result r = p.a.send(ah.to(p.b.qp_num()), tx.local(0, 8), 1);
    CHECK(r.status == post_status::backend_error);
    CHECK(r.err == EINVAL);
    CHECK(r.rule == post_rule::address_pd);
    CHECK(std::string(r.message()).find("address handle of another protection domain") != std::string::npos);
    auto batch = p.a.make_batch<4>();
    const auto good = x.pd.create_ah(p.b.local_endpoint());
    REQUIRE(batch.add(op::ud_send{tx.local(0, 8), good.to(p.b.qp_num())}, 2));
    REQUIRE(batch.add(op::ud_send{tx.local(0, 8), ah.to(p.b.qp_num())}, 3));
    const post_result rl = p.a.post(batch);
    CHECK(rl.rule == post_rule::address_pd);
    CHECK(rl.posted == 0);  // refused whole, before the device
    CHECK(x.cq.poll() == 0);
    CHECK_FALSE(p.a.in_error());
    CHECK(p.a.send_credits() == 8);
  }
}

// A UD send larger than the port's MTU was posted: it then completed LOC_LEN_ERR and put
// the queue pair in ERR, every later post qp_error, and the reset that recovers it gives
// a new QP number, so every peer's address of it was lost (helper-102's audit). Refused
// before the device now, single posts, gathers and post lists alike; the queue pair
// stays usable.
TEST_CASE("UD: a message larger than the port's MTU is refused before the device; the queue pair stays usable") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  const std::uint32_t mtu = mtu_bytes(x.dev.port().active_mtu);
  auto tx = x.pd.allocate<access::local_write>(2 * mtu);
  auto rx = y.pd.allocate<access::local_write>(2 * mtu + grh_bytes);
  const auto ah = x.pd.create_ah(p.b.local_endpoint());
  const auto to = ah.to(p.b.qp_num());
  const post_result r = p.a.send(to, tx.local(0, mtu + 1), 1);
  CHECK(r.status == post_status::backend_error);
  CHECK(r.err == EINVAL);
  CHECK(r.rule == post_rule::ud_mtu);
  CHECK(std::string(r.message()).find("larger than the queue pair's port MTU") != std::string::npos);
  // Where the limit is read (the refusal carries no number): the expression this test uses.
  CHECK(std::string(r.message()).find("mtu_bytes(dev.port().active_mtu)") != std::string::npos);
  CHECK(std::string(to_string(r.rule)) == "ud_mtu");
  CHECK(p.a.send_imm(to, tx.local(0, mtu + 1), 7, 2).rule == post_rule::ud_mtu);
  const local_buffer gather[] = {tx.local(0, mtu), tx.local(mtu, 1)};
  CHECK(p.a.post(op::ud_send{std::span<const local_buffer>(gather), to}, 3).rule == post_rule::ud_mtu);
  auto batch = p.a.make_batch<4, 2>();
  REQUIRE(batch.add(op::ud_send{tx.local(0, 8), to}, 4));
  REQUIRE(batch.add(op::ud_send{std::span<const local_buffer>(gather), to}, 5));
  const post_result rl = p.a.post(batch);
  CHECK(rl.rule == post_rule::ud_mtu);
  CHECK(rl.posted == 0);
  CHECK(x.cq.poll() == 0);  // nothing reached the device
  CHECK_FALSE(p.a.in_error());
  CHECK(p.a.send_credits() == 8);
  // The MTU itself goes, and arrives; after clear() the list takes WRs that fit.
  REQUIRE(p.b.post_recv(rx.local(), 9).ok());
  REQUIRE(p.a.send(to, tx.local(0, mtu), 6, send_flags::signaled).ok());
  int sent_ok = 0, received = 0;
  for (int i = 0; i < 100 && (sent_ok == 0 || received == 0); ++i) {
    (void)x.cq.poll([&](const completion<B>& c) { sent_ok += c.ok(); });
    (void)y.cq.poll([&](const completion<B>& c) { received += c.ok() && c.byte_len() == mtu + grh_bytes; });
  }
  CHECK(sent_ok == 1);
  CHECK(received == 1);
  batch.clear();
  REQUIRE(batch.add(op::ud_send{tx.local(0, 8), to}, 7));
  CHECK(p.a.post(batch).ok());
}

TEST_CASE("UD: an empty ud_address is refused (it names no handle)") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto tx = x.pd.allocate<access::local_write>(64);
  const ud_address<B> none{};
  CHECK_FALSE(none.live());
  CHECK(p.a.send(none, tx.local(0, 8), 1).status == post_status::stale_address);
  CHECK(x.cq.poll() == 0);
}

TEST_CASE("UD: a handle made where a destroyed one was does not revive the old one's addresses") {
  // The records are reused; a new handle in the same record must not take the stale
  // address's datagrams (they would go to the new handle's destination).
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto tx = x.pd.allocate<access::local_write>(64);
  auto rx = y.pd.allocate<access::local_write>(256);
  REQUIRE(p.b.post_recv(rx.local(), 1).ok());
  std::optional<address_handle<B>> first;
  first.emplace(x.pd.create_ah(p.b.local_endpoint()));
  const auto stale = first->to(p.b.local_endpoint());
  for (int round = 0; round < 3; ++round) {
    first.reset();
    first.emplace(x.pd.create_ah(p.b.local_endpoint()));
    CHECK_FALSE(stale.live());
    CHECK(p.a.send(stale, tx.local(0, 8), 2).status == post_status::stale_address);
  }
  const auto fresh = first->to(p.b.local_endpoint());
  CHECK(fresh.live());
  REQUIRE(p.a.send(fresh, tx.local(0, 8), 3).ok());
  CHECK(collect(y.cq, 1).size() == 1);
}

TEST_CASE("UD: moving an address handle keeps the addresses taken from it") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto tx = x.pd.allocate<access::local_write>(64);
  auto rx = y.pd.allocate<access::local_write>(256);
  REQUIRE(p.b.post_recv(rx.local(), 1).ok());
  auto ah = x.pd.create_ah(p.b.local_endpoint());
  const auto dest = ah.to(p.b.local_endpoint());
  address_handle<B> moved = std::move(ah);
  CHECK(dest.live());
  REQUIRE(p.a.send(dest, tx.local(0, 8), 2).ok());
  CHECK(collect(y.cq, 1).size() == 1);
  moved = address_handle<B>{};  // destroyed by assignment
  CHECK_FALSE(dest.live());
  CHECK(p.a.send(dest, tx.local(0, 8), 3).status == post_status::stale_address);
}

TEST_CASE("UD: a post list naming a handle destroyed after the WR was added is refused whole") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto tx = x.pd.allocate<access::local_write>(64);
  auto rx = y.pd.allocate<access::local_write>(512);
  for (std::uint64_t i = 0; i < 2; ++i) REQUIRE(p.b.post_recv(rx.local(i * 256, 256), i).ok());
  auto kept = x.pd.create_ah(p.b.local_endpoint());
  std::optional<address_handle<B>> gone;
  gone.emplace(x.pd.create_ah(p.b.local_endpoint()));
  auto batch = p.a.make_batch<4>();
  REQUIRE(batch.add(op::ud_send{tx.local(0, 8), kept.to(p.b.local_endpoint())}, 10));
  REQUIRE(batch.send(gone->to(p.b.local_endpoint()), tx.local(0, 8), 11));
  gone.reset();
  const post_result r = p.a.post(batch);
  CHECK(r.status == post_status::stale_address);
  CHECK(r.posted == 0);
  CHECK(batch.size() == 2);  // kept, as for the list's other refusals, until clear()
  CHECK(x.cq.poll() == 0);
  CHECK(p.a.send_credits() == 8);
  batch.clear();
  REQUIRE(batch.add(op::ud_send{tx.local(0, 8), kept.to(p.b.local_endpoint())}, 12));
  REQUIRE(p.a.post(batch).ok());
  CHECK(collect(y.cq, 1).size() == 1);
}

// A post list whose WRs all name one address checks that address once at post (send_batch
// keeps one ticket while they agree): each refusal must still be found, and a list that
// mixes addresses, or an address and a later one of the same handle record, checked WR by WR.
TEST_CASE("UD: a post list of one address is refused whole when that handle is gone or of another PD") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto tx = x.pd.allocate<access::local_write>(64);
  auto rx = y.pd.allocate<access::local_write>(1024);
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(p.b.post_recv(rx.local(i * 256, 256), i).ok());
  auto batch = p.a.make_batch<4>();
  {
    std::optional<address_handle<B>> gone;
    gone.emplace(x.pd.create_ah(p.b.local_endpoint()));
    const auto to = gone->to(p.b.local_endpoint());
    for (std::uint64_t i = 0; i < 3; ++i) REQUIRE(batch.add(op::ud_send{tx.local(0, 8), to}, 10 + i));
    gone.reset();
    const post_result r = p.a.post(batch);
    CHECK(r.status == post_status::stale_address);
    CHECK(r.posted == 0);
    CHECK(batch.size() == 3);
    batch.clear();
  }
  {
    // The same record again (a destroyed handle's is reused by the next one), a newer
    // generation: the first WR's address is stale, whichever comes first.
    std::optional<address_handle<B>> first;
    first.emplace(x.pd.create_ah(p.b.local_endpoint()));
    const auto old_to = first->to(p.b.local_endpoint());
    first.reset();
    auto next = x.pd.create_ah(p.b.local_endpoint());
    const auto new_to = next.to(p.b.local_endpoint());
    REQUIRE(batch.add(op::ud_send{tx.local(0, 8), new_to}, 20));
    REQUIRE(batch.add(op::ud_send{tx.local(0, 8), old_to}, 21));
    CHECK(p.a.post(batch).status == post_status::stale_address);
    batch.clear();
    REQUIRE(batch.add(op::ud_send{tx.local(0, 8), old_to}, 22));
    REQUIRE(batch.add(op::ud_send{tx.local(0, 8), new_to}, 23));
    CHECK(p.a.post(batch).status == post_status::stale_address);
    batch.clear();
  }
  {
    auto other_pd = x.dev.create_pd();
    auto ah = other_pd.create_ah(p.b.local_endpoint());
    for (std::uint64_t i = 0; i < 2; ++i) REQUIRE(batch.add(op::ud_send{tx.local(0, 8), ah.to(p.b.qp_num())}, 30 + i));
    const post_result r = p.a.post(batch);
    CHECK(r.rule == post_rule::address_pd);
    CHECK(r.posted == 0);
    batch.clear();
  }
  CHECK(x.cq.poll() == 0);
  CHECK(p.a.send_credits() == 8);
  // After the refusals, cleared lists of one address and of two go out.
  auto kept = x.pd.create_ah(p.b.local_endpoint());
  auto also = x.pd.create_ah(p.b.local_endpoint());
  for (std::uint64_t i = 0; i < 2; ++i) REQUIRE(batch.add(op::ud_send{tx.local(0, 8), kept.to(p.b.local_endpoint())}, 40 + i));
  REQUIRE(p.a.post(batch).ok());
  REQUIRE(batch.add(op::ud_send{tx.local(0, 8), kept.to(p.b.local_endpoint())}, 42));
  REQUIRE(batch.add(op::ud_send{tx.local(0, 8), also.to(p.b.local_endpoint())}, 43));
  REQUIRE(p.a.post(batch).ok());
  CHECK(collect(y.cq, 4).size() == 4);
}

TEST_CASE("UD: an address outliving its handle, PD and device is still refused, not read") {
  std::optional<ud_address<B>> dest;
  mock::fabric fab;
  side y(fab, "mock1");
  auto receiver = y.pd.create_qp<ud>(y.cq, qp_cap{8, 8}).activate();
  {
    side x(fab, "mock0");
    auto ah = x.pd.create_ah(receiver.local_endpoint());
    dest = ah.to(receiver.local_endpoint());
  }  // the handle, then its PD and device are gone
  side z(fab, "mock0");
  auto sender = z.pd.create_qp<ud>(z.cq, qp_cap{8, 8}).activate();
  auto tx = z.pd.allocate<access::local_write>(64);
  CHECK_FALSE(dest->live());
  CHECK(sender.send(*dest, tx.local(0, 8), 1).status == post_status::stale_address);
}

// The address vector keeps the source GID index in 8 bits: 256 was slot 0, 257 slot 1,
// and -255 slot 1, all accepted; an empty slot failed only at send time.
TEST_CASE("create_ah: a gid_index outside the port's GID table, or naming an empty slot, is a usage_error") {
  mock::fabric fab;
  side x(fab, "mock0"), y(fab, "mock1");
  auto p = make_pair<ud>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  const endpoint peer = p.b.local_endpoint();
  for (int bad : {256, 257, -255, -1})
    CHECK_THROWS_WITH_AS((void)x.pd.create_ah(peer, {.gid_index = bad}),
                         doctest::Contains(bad > 0 ? "is above 255" : "not a valid slot"), usage_error);
  const auto len = x.dev.port().gid_tbl_len;
  CHECK_THROWS_AS((void)x.pd.create_ah(peer, {.gid_index = static_cast<int>(len) - 1}), usage_error);  // empty
  CHECK_NOTHROW((void)x.pd.create_ah(peer, {.gid_index = x.dev.default_gid_index()}));
}

TEST_CASE("create_ah: a gid_index above 255 is refused even where the GID table is larger (rxe: 1024)") {
  // The table check passed 300 on such a port, and the 8-bit sgid_index made it slot 44.
  using G = big_gid_table;
  mock::fabric fab;
  basic_side<G> x(fab, "mock0"), y(fab, "mock1");
  REQUIRE(x.dev.port().gid_tbl_len == 1024);
  REQUIRE(x.dev.gid(1, 300).valid);
  auto qy = y.pd.create_qp<ud>(y.cq, qp_cap{8, 8});
  const endpoint peer = qy.local_endpoint();
  CHECK_THROWS_WITH_AS((void)x.pd.create_ah(peer, {.gid_index = 300}),
                       doctest::Contains("ah_options::gid_index = 300 is above 255"), usage_error);
  CHECK_NOTHROW((void)x.pd.create_ah(peer, {.gid_index = 1}));
}

// On InfiniBand a UD server answers a client by its LID, which only the receive's
// completion tells (no GRH there): the backends' wc had slid and sl, the completion
// did not show them, and ah_options had no service level to answer at.
TEST_CASE("UD on InfiniBand: a server answers a client from its completion's slid(), src_qp() and sl()") {
  mock::fabric_config cfg;
  mock::port_config ib;
  ib.layer = link_layer::infiniband;
  cfg.devices = {{.name = "ib0", .ports = {ib}}, {.name = "ib1", .ports = {ib}}};
  mock::fabric fab(cfg);
  side client(fab, "ib0"), server(fab, "ib1");
  auto p = make_pair<ud>(client.pd, client.cq, server.pd, server.cq, qp_cap{8, 8});
  const endpoint server_ep = p.b.local_endpoint();
  REQUIRE(server_ep.lid != 0);
  CHECK(server_ep.gid.is_zero());  // InfiniBand: addressed by LID
  CHECK_THROWS_WITH_AS((void)client.pd.create_ah(server_ep, {.sl = 16}), doctest::Contains("use 0..15"), usage_error);
  const auto ah = client.pd.create_ah(server_ep, {.sl = 5});

  auto tx = client.pd.allocate<access::local_write>(256);
  auto rx = server.pd.allocate<access::local_write>(256);
  std::memset(rx.data(), 0xee, 256);
  REQUIRE(p.b.post_recv(rx.local(), 1).ok());
  REQUIRE(p.a.post_recv(tx.local(128, 128), 2).ok());
  std::memcpy(tx.data(), "ping", 5);
  REQUIRE(p.a.send(ah.to(server_ep), tx.local(0, 5), 3).ok());

  std::optional<endpoint> from;
  std::uint8_t sl = 0;
  bool grh = true;
  for (int i = 0; i < 100 && !from; ++i) server.cq.poll([&](const completion<B>& c) {
    REQUIRE(c.ok());
    from = endpoint{.lid = c.slid(), .qpn = c.src_qp()};
    sl = c.sl();
    grh = c.has_grh();
  });
  REQUIRE(from);
  CHECK(from->lid == p.a.local_endpoint().lid);
  CHECK(from->qpn == p.a.qp_num());
  CHECK(sl == 5);
  // No GRH on a subnet-local InfiniBand datagram: none flagged, the 40 bytes left as they were.
  CHECK_FALSE(grh);
  CHECK(rx.data()[0] == std::byte{0xee});
  CHECK(std::memcmp(rx.data() + 40, "ping", 5) == 0);

  const auto back = server.pd.create_ah(*from, {.sl = sl});
  std::memcpy(rx.data() + 64, "pong", 5);
  REQUIRE(p.b.send(back.to(*from), rx.local(64, 5), 4).ok());
  bool answered = false;
  for (int i = 0; i < 100 && !answered; ++i) client.cq.poll([&](const completion<B>& c) {
    if (!c.is_recv()) return;
    answered = c.ok() && std::memcmp(tx.data() + 128 + 40, "pong", 5) == 0;
    CHECK(c.slid() == server_ep.lid);
    CHECK(c.sl() == 5);
  });
  CHECK(answered);
}
