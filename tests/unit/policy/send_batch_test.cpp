#include "fixture.hpp"

#include <cstring>
#include <random>
#include <span>

using namespace policy_test;

// send_batch.hpp: the WRs are built in place when added; post sets only their flags.

TEST_CASE_FIXTURE(two_regions, "a post list signals the policy's positions across posts, and what the caller asks") {
  auto p = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto batch = decltype(p.a)::make_batch<8>();
  for (std::uint64_t i = 1; i <= 6; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
  REQUIRE(p.a.post(batch).ok());  // 4 is the 4th WR
  CHECK(batch.empty());
  for (std::uint64_t i = 7; i <= 10; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
  REQUIRE(p.a.post(batch).ok());  // the run continues across lists: 8 is the 8th
  // 12 is the 12th; 13 is signaled because the caller asks (the general path).
  for (std::uint64_t i = 11; i <= 12; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
  REQUIRE(batch.add(op::write{src.local(0, 8), dst.remote()}, 13, send_flags::signaled));
  REQUIRE(p.a.post(batch).ok());
  std::vector<std::uint64_t> ids;
  for (const auto& c : collect(x.cq, 4)) ids.push_back(c.wr_id);
  CHECK(ids == std::vector<std::uint64_t>{4, 8, 12, 13});
  CHECK(p.a.send_credits() == 16);
}

// An empty list on an empty handle (the object connect() took) or a QP in ERR was ok:
// the misuse went unreported whenever the list happened to be empty (found by an audit).
// On a live queue pair it was ok too, which hid a list posted again without reuse()
// (its first post emptied it): a bandwidth loop "succeeded" sending nothing (helper-98's
// audit). It is empty_list now.
TEST_CASE_FIXTURE(two_regions, "an empty post list posts nothing and is refused as empty_list, whatever the credits and the policy; on an empty handle or in ERR as any post") {
  auto check_empty_posts = [&](auto& qp, post_status expected = post_status::empty_list) {
    auto batch = std::remove_reference_t<decltype(qp)>::template make_batch<4>();
    auto r = qp.post(batch);
    CHECK(r.status == expected);
    CHECK(r.posted == 0);
    batch.reuse();
    for (std::uint64_t i = 1; i <= 4; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
    batch.clear();  // a reused list emptied: still nothing to post
    r = qp.post(batch);
    CHECK(r.status == expected);
    CHECK(r.posted == 0);
  };
  auto every = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto all = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto manual = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  check_empty_posts(every.a);
  check_empty_posts(all.a);
  check_empty_posts(manual.a);
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(every.a.write(src.local(0, 8), dst.remote(), i).ok());
  REQUIRE_FALSE(every.a.can_post());
  check_empty_posts(every.a);  // a full send queue
  CHECK(every.a.can_post(0));
  decltype(every.a) moved = std::move(every.a);
  check_empty_posts(every.a, post_status::empty_handle);
  CHECK(every.a.post(op::write{src.local(0, 8), dst.remote()}, 9).status == post_status::empty_handle);
  CHECK_THROWS_WITH_AS((void)every.a.can_post(0), doctest::Contains("empty"), usage_error);
  CHECK(collect(x.cq, 1).size() == 1);
  CHECK(moved.send_credits() == 4);
  // A WRITE the peer refuses (a wrong rkey) puts the queue pair in ERR once polled.
  const auto wrong_key = remote_region<access::remote_write>::unchecked(dst.remote().addr(), dst.remote().rkey() ^ 0x55, 8);
  REQUIRE(all.a.write(src.local(0, 8), wrong_key, 1).ok());
  REQUIRE(collect(x.cq, 1).size() == 1);
  REQUIRE(all.a.in_error());
  check_empty_posts(all.a, post_status::qp_error);
  CHECK_FALSE(all.a.can_post(0));
}

TEST_CASE_FIXTURE(two_regions, "after a partial post the batch keeps the refused WRs in place until cleared") {
  auto p = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 2, 2, 0});
  auto batch = decltype(p.a)::make_batch<2, 3>();
  const local_buffer three[3] = {src.local(0, 8), src.local(8, 8), src.local(16, 8)};
  REQUIRE(batch.write(src.local(0, 8), dst.remote(), 1));
  REQUIRE(batch.write(std::span<const local_buffer>(three), dst.remote(), 2));  // 3 SGEs: the QP takes 2
  CHECK_FALSE(batch.write(src.local(0, 8), dst.remote(), 3));  // Max WRs added
  const auto r = p.a.post(batch);
  CHECK(r.status == post_status::backend_error);
  CHECK(r.posted == 1);
  CHECK(batch.size() == 1);  // the refused WR
  CHECK(batch.full());       // the posted one keeps its room until the batch is emptied
  CHECK(collect(x.cq, 1).size() == 1);
  batch.clear();
  REQUIRE(batch.write(src.local(0, 8), dst.remote(), 4));
  REQUIRE(batch.write(src.local(8, 8), dst.remote(), 5));
  REQUIRE(p.a.post(batch).ok());
  std::vector<std::uint64_t> ids;
  for (const auto& c : collect(x.cq, 2)) ids.push_back(c.wr_id);
  CHECK(ids == std::vector<std::uint64_t>{4, 5});
  CHECK(p.a.send_credits() == 16);
}

TEST_CASE_FIXTURE(two_regions, "receives_needed() counts the WRs that take a receive, of those not posted yet") {
  auto p = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 2, 2, 0});
  for (int i = 0; i < 4; ++i) REQUIRE(p.b.post_recv(dst.local(0, 64), 100).ok());
  auto batch = decltype(p.a)::make_batch<4, 3>();
  CHECK(batch.receives_needed() == 0);
  const local_buffer three[3] = {src.local(0, 8), src.local(8, 8), src.local(16, 8)};
  REQUIRE(batch.add(op::send<>{src.local(0, 8)}, 1));
  REQUIRE(batch.write(std::span<const local_buffer>(three), dst.remote(), 2));  // 3 SGEs: the QP takes 2
  REQUIRE(batch.add(op::write_imm{src.local(0, 8), dst.remote(), 7}, 3));
  REQUIRE(batch.write(src.local(0, 8), dst.remote(), 4));
  CHECK(batch.receives_needed() == 2);
  const auto r = p.a.post(batch);
  REQUIRE(r.status == post_status::backend_error);
  CHECK(r.posted == 1);             // the SEND went
  CHECK(batch.receives_needed() == 1);  // the WRITE with immediate is still there
  batch.clear();
  CHECK(batch.receives_needed() == 0);
  CHECK(takes_receive(opcode::send_with_inv));
  CHECK_FALSE(takes_receive(opcode::rdma_read));
}

TEST_CASE_FIXTURE(two_regions, "a list posted again without reuse() is refused as empty_list, saying to call reuse()") {
  auto p = make_pair<rc, signal_every<16>>(x.pd, x.cq, y.pd, y.cq, qp_cap{64, 4});
  auto batch = decltype(p.a)::make_batch<32>();  // reuse() forgotten
  for (std::uint64_t i = 0; i < 32; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
  const post_result first = p.a.post(batch);
  REQUIRE(first.ok());
  CHECK(first.posted == 32);
  const post_result again = p.a.post(batch);
  CHECK(again.status == post_status::empty_list);
  CHECK(again.posted == 0);
  CHECK(std::string(again.message()).find("reuse()") != std::string::npos);
  CHECK(std::string(to_string(again.status)) == "empty_list");
  CHECK(collect(x.cq, 2).size() == 2);  // the first post's signals (16th and 32nd)
  CHECK(p.a.send_credits() == 64);
}

// add() is false only when the batch is full: a WR with more SGEs than a WR of the batch
// holds was refused there too, so a loop that posts until the add succeeds spun forever
// (it posted an empty list each time). It is kept now, and post refuses the list.
TEST_CASE_FIXTURE(two_regions, "a WR with more SGEs than a WR of the batch holds is kept, and post refuses the list") {
  auto p = make_pair<rc>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 2, 2, 0});
  auto batch = decltype(p.a)::make_batch<4, 1>();
  const local_buffer two[2] = {src.local(0, 8), src.local(8, 8)};
  CHECK(batch.write(src.local(0, 8), dst.remote(), 1));
  int posts = 0;
  while (!batch.write(std::span<const local_buffer>(two), dst.remote(), 2) && posts < 3) {
    (void)p.a.post(batch);
    ++posts;
  }
  CHECK(posts == 0);
  CHECK(batch.size() == 2);
  const post_result r = p.a.post(batch);
  CHECK(r.status == post_status::backend_error);
  CHECK(r.err == EINVAL);
  CHECK(r.rule == post_rule::sge_count);
  CHECK(r.posted == 0);
  CHECK(std::string(r.message()).find("SgePerWr") != std::string::npos);
  CHECK(batch.size() == 2);  // nothing posted, nothing dropped
  CHECK(p.a.send_credits() == 16);
  batch.clear();
  CHECK(batch.write(src.local(0, 8), dst.remote(), 3));
  CHECK(p.a.post(batch).ok());
  CHECK(collect(x.cq, 1).size() == 1);
}

TEST_CASE_FIXTURE(two_regions, "a batch built for one signaling policy is signaled by the policy of the QP it is posted on") {
  auto all = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto every = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto ids_of = [&](std::size_t n) {
    std::vector<std::uint64_t> ids;
    for (const auto& c : collect(x.cq, n + 1, 200)) ids.push_back(c.wr_id);  // n + 1: no extra one
    return ids;
  };
  SUBCASE("signal_all's batch (built signaled) on a signal_every<4> QP") {
    auto batch = decltype(all.a)::make_batch<8>();
    for (std::uint64_t i = 1; i <= 8; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
    REQUIRE(every.a.post(batch).ok());
    CHECK(ids_of(2) == std::vector<std::uint64_t>{4, 8});
    CHECK(every.a.send_credits() == 16);
  }
  SUBCASE("signal_every<4>'s batch on a signal_all QP") {
    auto batch = decltype(every.a)::make_batch<8>();
    for (std::uint64_t i = 1; i <= 3; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
    REQUIRE(all.a.post(batch).ok());
    CHECK(ids_of(3) == std::vector<std::uint64_t>{1, 2, 3});
    CHECK(all.a.send_credits() == 16);
  }
  SUBCASE("signal_all's own batch: every WR completes, across posts") {
    auto batch = decltype(all.a)::make_batch<4>();
    for (int round = 0; round < 3; ++round) {
      for (std::uint64_t i = 1; i <= 4; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
      REQUIRE(all.a.post(batch).ok());
    }
    CHECK(ids_of(12).size() == 12);
    CHECK(all.a.send_credits() == 16);
  }
}

TEST_CASE_FIXTURE(two_regions, "a reused post list posts the same WRs again, signaled where the policy's run puts them") {
  auto p = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto batch = decltype(p.a)::make_batch<8>();
  batch.reuse();
  CHECK(batch.reused());
  for (std::uint64_t i = 1; i <= 6; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
  // The run moves by 6 a post: the 4th WR, then the 2nd and 6th, then the 4th again. A
  // flag left from the post before would show as an extra completion.
  std::vector<std::vector<std::uint64_t>> signaled;
  for (int post = 0; post < 3; ++post) {
    REQUIRE(p.a.post(batch).ok());
    CHECK(batch.size() == 6);
    std::vector<std::uint64_t> ids;
    for (const auto& c : collect(x.cq, 3, 200)) ids.push_back(c.wr_id);
    signaled.push_back(ids);
  }
  CHECK(signaled == std::vector<std::vector<std::uint64_t>>{{4}, {2, 6}, {4}});
  CHECK(p.a.unsignaled_run() == 2);
  batch.clear();
  CHECK(batch.empty());
  CHECK(batch.reused());
  REQUIRE(batch.write(src.local(0, 8), dst.remote(), 7));
  REQUIRE(batch.write(src.local(0, 8), dst.remote(), 8));
  REQUIRE(p.a.post(batch).ok());  // the run reaches 4 at the 2nd
  std::vector<std::uint64_t> ids;
  for (const auto& c : collect(x.cq, 2, 200)) ids.push_back(c.wr_id);
  CHECK(ids == std::vector<std::uint64_t>{8});
  CHECK(p.a.send_credits() == 16);
}

TEST_CASE_FIXTURE(two_regions, "a reused list under signal_every keeps its flags while its signals stay, rewrites them when a post moves them") {
  auto p = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto batch = decltype(p.a)::make_batch<4>();
  batch.reuse();
  for (std::uint64_t i = 1; i <= 4; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
  auto signaled_by = [&](auto&& post) {
    REQUIRE(post());
    std::vector<std::uint64_t> ids;
    for (const auto& c : collect(x.cq, 2, 200)) ids.push_back(c.wr_id);
    return ids;
  };
  auto list = [&] { return p.a.post(batch).ok(); };
  CHECK(signaled_by(list) == std::vector<std::uint64_t>{4});  // positions 1-4
  CHECK(signaled_by(list) == std::vector<std::uint64_t>{4});  // 5-8: the same places, flags kept
  // One more WR (position 9) moves the list's signal to its 3rd WR (position 12).
  REQUIRE(p.a.write(src.local(0, 8), dst.remote(), 9).ok());
  CHECK(signaled_by(list) == std::vector<std::uint64_t>{3});  // 10-13
  CHECK(signaled_by(list) == std::vector<std::uint64_t>{3});  // 14-17
  CHECK(p.a.unsignaled_run() == 1);
}

// A list longer than the free slots whose other slots unsignaled WRs hold: no completion
// will come to free them, so "poll, then post again" would never end. It was sq_full, for
// ever (audit 23); it says so now, and posting fewer WRs (here one: the policy signals it)
// makes room.
TEST_CASE_FIXTURE(two_regions, "a list that unsignaled WRs keep out is refused as no_completion_due, and fits once fewer are posted") {
  auto check = [&](auto& qp) {
    for (std::uint64_t i = 0; i < 15; ++i) REQUIRE(qp.write(src.local(0, 8), dst.remote(), i).ok());
    REQUIRE(qp.unsignaled_run() == 15);
    auto list = std::remove_reference_t<decltype(qp)>::template make_batch<2>();
    list.reuse();
    for (std::uint64_t i = 15; i < 17; ++i) REQUIRE(list.write(src.local(0, 8), dst.remote(), i));
    const auto r = qp.post(list);
    CHECK(r.status == post_status::no_completion_due);
    CHECK(std::string(r.message()).find("post fewer WRs first") != std::string::npos);
    CHECK(x.cq.poll([](const auto&) {}) == 0);  // nothing is coming
    REQUIRE(qp.write(src.local(0, 8), dst.remote(), 99).ok());  // the 16th, the last slot: signaled
    CHECK(collect(x.cq, 1, 200).at(0).wr_id == 99);
    CHECK(qp.post(list).ok());
  };
  auto every = make_pair<uc, signal_every<16>>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  check(every.a);
  auto manual = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  check(manual.a);
}

TEST_CASE_FIXTURE(two_regions, "a reused post list under signal_manual moves its one signal with the credits") {
  auto p = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto batch = decltype(p.a)::make_batch<4>();
  batch.reuse();
  for (std::uint64_t i = 1; i <= 4; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
  REQUIRE(p.a.post(batch).ok());  // slots 1-4: nothing signaled
  REQUIRE(p.a.post(batch).ok());  // slots 5-8: the 4th takes the last slot
  CHECK(p.a.post(batch).status == post_status::sq_full);
  std::vector<std::uint64_t> ids;
  for (const auto& c : collect(x.cq, 2, 200)) ids.push_back(c.wr_id);
  CHECK(ids == std::vector<std::uint64_t>{4});
  CHECK(p.a.send_credits() == 8);
  REQUIRE(p.a.post(batch).ok());  // slots 1-4 again: the 4th is unsignaled this time
  REQUIRE(p.a.post(batch).ok());
  ids.clear();
  for (const auto& c : collect(x.cq, 2, 200)) ids.push_back(c.wr_id);
  CHECK(ids == std::vector<std::uint64_t>{4});
  CHECK(p.a.send_credits() == 8);
}

TEST_CASE_FIXTURE(two_regions, "a reused list posted on queue pairs of different policies is signaled by each one's") {
  // The flags a reused list keeps are those of the policy it was last posted under: a
  // queue pair of another policy finds the same position and length, not the same flags.
  auto every4 = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto every2 = make_pair<rc, signal_every<2>>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto manual = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto all = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto signaled_by = [&](auto& qp, auto& batch) {
    REQUIRE(qp.post(batch).ok());
    std::vector<std::uint64_t> ids;
    for (const auto& c : collect(x.cq, 5, 200)) ids.push_back(c.wr_id);
    return ids;
  };
  SUBCASE("signal_every<4>, then signal_every<2> at the same position") {
    auto batch = decltype(every4.a)::make_batch<4>();
    batch.reuse();
    for (std::uint64_t i = 1; i <= 4; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
    CHECK(signaled_by(every4.a, batch) == std::vector<std::uint64_t>{4});
    CHECK(signaled_by(every2.a, batch) == std::vector<std::uint64_t>{2, 4});
    CHECK(every2.a.send_credits() == 16);
    CHECK(signaled_by(every4.a, batch) == std::vector<std::uint64_t>{4});
    CHECK(every4.a.send_credits() == 16);
  }
  SUBCASE("signal_every<4>, signal_manual, then signal_every<4> at the same position") {
    auto batch = decltype(every4.a)::make_batch<4>();
    batch.reuse();
    for (std::uint64_t i = 1; i <= 4; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
    CHECK(signaled_by(every4.a, batch) == std::vector<std::uint64_t>{4});
    CHECK(signaled_by(manual.a, batch).empty());  // 4 of 16 slots: no last-slot signal
    CHECK(signaled_by(every4.a, batch) == std::vector<std::uint64_t>{4});
    CHECK(every4.a.send_credits() == 16);
  }
  SUBCASE("signal_all's list (built signaled), on signal_every<4>, then on signal_all") {
    auto batch = decltype(all.a)::make_batch<4>();
    batch.reuse();
    for (std::uint64_t i = 1; i <= 4; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
    CHECK(signaled_by(all.a, batch) == std::vector<std::uint64_t>{1, 2, 3, 4});
    CHECK(signaled_by(every4.a, batch) == std::vector<std::uint64_t>{4});
    CHECK(signaled_by(all.a, batch) == std::vector<std::uint64_t>{1, 2, 3, 4});
    CHECK(all.a.send_credits() == 16);
  }
}

TEST_CASE_FIXTURE(two_regions, "a reused list goes inline on a queue pair that takes it, and back without on one that does not") {
  // The same key (signal_every: position modulo N and length; signal_manual: the length,
  // the last WR taking the last free slot) on a queue pair with inline data: posted as it
  // was, the WRs would name src's lkey, which the other PD does not know. Back on the
  // first queue pair, which takes no inline data, the inline flags must go. Depth 4: each
  // list of 4 fills the send queue, so both policies signal its last WR.
  auto on_both = [&]<class S>(S) {
    auto narrow = make_pair<rc, S>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
    auto pd2 = x.dev.create_pd();
    auto wide = make_pair<rc, S>(pd2, x.cq, y.pd, y.cq, qp_cap{4, 4, 1, 1, 64});
    auto batch = decltype(narrow.a)::template make_batch<4>();
    batch.reuse();
    for (std::uint64_t i = 1; i <= 4; ++i) REQUIRE(batch.write(src.local(0, 8), dst.remote().sub(8 * i, 8), i));
    std::memcpy(src.data(), "reused!", 8);
    auto posted = [&](auto& qp) {
      REQUIRE(qp.post(batch).ok());
      return collect(x.cq, 2, 200);
    };
    for (int twice = 0; twice < 2; ++twice) {  // the second post finds the key it left
      auto on_narrow = posted(narrow.a);
      REQUIRE(on_narrow.size() == 1);
      CHECK(on_narrow[0].status == wc_status::success);
    }
    for (int twice = 0; twice < 2; ++twice) {
      auto on_wide = posted(wide.a);
      REQUIRE(on_wide.size() == 1);
      CHECK(on_wide[0].wr_id == 4);
      CHECK(on_wide[0].status == wc_status::success);
    }
    CHECK(std::memcmp(dst.data() + 32, "reused!", 8) == 0);
    CHECK(wide.a.send_credits() == 4);
    REQUIRE(narrow.a.post(batch).ok());  // and as before on the narrow one
    CHECK(collect(x.cq, 2, 200).at(0).status == wc_status::success);
  };
  SUBCASE("signal_every<4>") { on_both(signal_every<4>{}); }
  SUBCASE("signal_manual") { on_both(signal_manual{}); }
}

TEST_CASE_FIXTURE(inline_pair, "a list's WRs added with send_flags::no_auto_inline are not inline, and the flag stays in rdmakit") {
  auto batch = decltype(p.a)::make_batch<3>();
  REQUIRE(batch.write(unregistered, dst.remote(), 1));  // inline on its own: no lkey read
  REQUIRE(batch.write(unregistered, dst.remote(), 2, send_flags::no_auto_inline | send_flags::inline_data));
  REQUIRE(batch.write(unregistered, dst.remote(), 3, send_flags::no_auto_inline));  // read through lkey 0
  REQUIRE(p.a.post(batch).ok());
  const auto r = collect(x.cq, 3);
  REQUIRE(r.size() == 3);
  CHECK(r[0].status == wc_status::success);
  CHECK(r[1].status == wc_status::success);
  CHECK(r[2].status == wc_status::loc_prot_err);
  CHECK(has_any(flag_recording::seen, send_flags::inline_data));
  CHECK_FALSE(has_any(flag_recording::seen, send_flags::no_auto_inline));
}

TEST_CASE_FIXTURE(inline_pair, "a list posted once goes inline where its WRs fit, signaled where the policy says") {
  // Eight WRs alternating 100 registered bytes (too big for inline) and 12 unregistered
  // ones (they fit the 64 inline bytes, and are read through lkey 0 unless inline), the
  // signaled WRs among the small ones.
  // A WR left without its inline flag fails with LOC_PROT_ERR; a signal out of place
  // shows in the wr_ids that complete.
  auto big = x.pd.allocate<rw_access>(128);
  auto sink = y.pd.allocate<rw_access>(8 * 128);
  std::memcpy(stack_buf, "fits inline", 12);
  auto posted_once = [&](auto& qp) {
    auto batch = std::remove_reference_t<decltype(qp)>::template make_batch<8>();
    for (std::uint64_t i = 1; i <= 8; ++i) {
      const bool small = i % 2 == 0;
      REQUIRE(batch.write(small ? unregistered : big.local(0, 100), sink.remote().sub(128 * (i - 1), small ? 12 : 100), i));
    }
    REQUIRE(qp.post(batch).ok());
    CHECK(batch.empty());
    const auto r = collect(x.cq, 8, 200);
    for (const auto& c : r) CHECK_MESSAGE(c.status == wc_status::success, "wr_id " << c.wr_id);
    CHECK(std::memcmp(sink.data() + 128 * 7, "fits inline", 12) == 0);  // the last WR's bytes
    return wr_ids_of(r);
  };
  const qp_cap caps{8, 8, 1, 1, 64};
  SUBCASE("signal_all") {
    CHECK(posted_once(p.a) == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6, 7, 8});
  }
  SUBCASE("signal_every<4>") {
    auto q = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, caps);
    CHECK(posted_once(q.a) == std::vector<std::uint64_t>{4, 8});
  }
  SUBCASE("signal_manual: the WR that takes the last free slot") {
    auto q = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, caps);
    CHECK(posted_once(q.a) == std::vector<std::uint64_t>{8});
  }
}

TEST_CASE_FIXTURE(two_regions, "a reused list is signaled and credited as the same WRs posted one by one") {
  // Differential: the same WRs go to `lst` as a reused list (keyed posts, the fast paths
  // when the signals fall as before or, under signal_manual, the last slot moves to or
  // from the list's last WR; partial lists after adds and clears) and to `one` one post
  // at a time. Every poll must find the same wr_ids, credits and run on both.
  auto differential = [&]<class S>(S) {
    auto cq2 = x.dev.create_cq(1024);
    auto lst = make_pair<rc, S>(x.pd, x.cq, y.pd, y.cq, qp_cap{32, 32});
    auto one = make_pair<rc, S>(x.pd, cq2, y.pd, y.cq, qp_cap{32, 32});
    auto batch = decltype(lst.a)::template make_batch<8>();
    batch.reuse();
    struct wr_spec {
      std::uint64_t id;
      send_flags flags;
  };
  std::vector<wr_spec> in_list;
  std::uint64_t next_id = 1;
  std::mt19937 rng(12);
  auto add = [&] {
    const wr_spec w{next_id++, rng() % 5 == 0 ? send_flags::signaled : send_flags::none};
    REQUIRE(batch.add(op::write{src.local(0, 8), dst.remote()}, w.id, w.flags));
    in_list.push_back(w);
  };
  auto compare_polls = [&] {
    std::vector<std::uint64_t> a, b;
    for (const auto& c : collect(x.cq, 1000, 3)) a.push_back(c.wr_id);
    for (const auto& c : collect(cq2, 1000, 3)) b.push_back(c.wr_id);
    CHECK(a == b);
    CHECK(lst.a.send_credits() == one.a.send_credits());
    CHECK(lst.a.unsignaled_run() == one.a.unsignaled_run());
  };
  for (int i = 0; i < 4; ++i) add();
  int list_posts = 0;
  for (int step = 0; step < 3000; ++step) {
    const unsigned what = rng() % 10;
    if (what < 5) {  // the list, when both have the credits for it
      if (in_list.empty() || lst.a.send_credits() < in_list.size()) {
        compare_polls();
        continue;
      }
      REQUIRE(lst.a.post(batch).ok());
      for (const auto& w : in_list) REQUIRE(one.a.post(op::write{src.local(0, 8), dst.remote()}, w.id, w.flags).ok());
      ++list_posts;
    } else if (what == 5) {
      if (!batch.full()) add();
    } else if (what == 6) {
      batch.clear();
      in_list.clear();
      for (unsigned k = 1 + rng() % 8; k > 0; --k) add();
    } else if (what == 7) {  // one WR on both, which moves the list's signals
      if (lst.a.send_credits() == 0) continue;
      const std::uint64_t id = next_id++;
      REQUIRE(lst.a.post(op::write{src.local(0, 8), dst.remote()}, id).ok());
      REQUIRE(one.a.post(op::write{src.local(0, 8), dst.remote()}, id).ok());
    } else {
      compare_polls();
    }
  }
  compare_polls();
  CHECK(list_posts > 500);
  };
  SUBCASE("signal_every<4>") { differential(signal_every<4>{}); }
  SUBCASE("signal_manual") { differential(signal_manual{}); }
}

TEST_CASE_FIXTURE(two_regions, "a reused list partly posted goes on from the WR refused, and later posts start there too") {
  // The device of `narrow` refuses WR 3 (two SGEs, it takes one): WRs 1 and 2 are posted,
  // the list keeps 3..8 where they are. Posted on `wide`, each post must start at WR 3
  // (not at the list's first slot, where a keyed post starts) and signal where the
  // policy puts the signals.
  auto narrow = make_pair<rc, signal_every<2>>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16, 1, 1});
  auto cq2 = x.dev.create_cq(64);
  auto wide = make_pair<rc, signal_every<2>>(x.pd, cq2, y.pd, y.cq, qp_cap{16, 16, 2, 2});
  auto batch = decltype(narrow.a)::make_batch<8, 2>();
  batch.reuse();
  const local_buffer two[2] = {src.local(0, 8), src.local(8, 8)};
  for (std::uint64_t i = 1; i <= 8; ++i) {
    if (i == 3)
      REQUIRE(batch.write(std::span<const local_buffer>(two), dst.remote(), i));
    else
      REQUIRE(batch.write(src.local(0, 8), dst.remote(), i));
  }
  const auto r = narrow.a.post(batch);
  REQUIRE(r.status == post_status::backend_error);
  CHECK(r.posted == 2);
  CHECK(batch.size() == 6);
  CHECK(wr_ids_of(collect(x.cq, 2, 200)) == std::vector<std::uint64_t>{2});
  for (int round = 0; round < 3; ++round) {  // the first post keys the list, the others take the fast path
    REQUIRE(wide.a.post(batch).ok());
    CHECK(wr_ids_of(collect(cq2, 4, 200)) == std::vector<std::uint64_t>{4, 6, 8});
    CHECK(wide.a.send_credits() == 16);
  }
}

TEST_CASE_FIXTURE(two_regions, "WRs added to a reused list after a post are posted with it") {
  // The post ended the chain at the list's last WR: a WR added after it must be reached.
  auto p = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{16, 16});
  auto batch = decltype(p.a)::make_batch<4>();
  batch.reuse();
  auto posted_ids = [&](std::size_t n) {
    REQUIRE(p.a.post(batch).ok());
    std::vector<std::uint64_t> ids;
    for (const auto& c : collect(x.cq, n + 1, 200)) ids.push_back(c.wr_id);
    return ids;
  };
  REQUIRE(batch.write(src.local(0, 8), dst.remote(), 1));
  REQUIRE(batch.write(src.local(0, 8), dst.remote(), 2));
  CHECK(posted_ids(2) == std::vector<std::uint64_t>{1, 2});
  REQUIRE(batch.write(src.local(0, 8), dst.remote(), 3));
  CHECK(posted_ids(3) == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(posted_ids(3) == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(p.a.send_credits() == 16);
  REQUIRE(batch.write(src.local(0, 8), dst.remote(), 4));
  CHECK(!batch.write(src.local(0, 8), dst.remote(), 5));  // full: Max WRs since it was last emptied
  CHECK(posted_ids(4) == std::vector<std::uint64_t>{1, 2, 3, 4});
  CHECK(p.a.send_credits() == 16);
}
