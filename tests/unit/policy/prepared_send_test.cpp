#include "fixture.hpp"

#include <cstring>
#include <span>
#include <stdexcept>

using namespace policy_test;

// prepared_send.hpp: a WR built once by queue_pair::prepare and posted again and again
// with the queue pair's credits, signaling policy and refusals.

TEST_CASE_FIXTURE(two_regions, "a prepared WRITE posted again and again lands each time and keeps the policy's signals") {
  auto p = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto w = p.a.prepare(op::write{src.local(0, 16), dst.remote().sub(16, 16)}, 5);
  CHECK(w.wr_id() == 5);
  CHECK_FALSE(w.is_inline());  // max_inline_data 0
  std::memset(src.data(), 0xab, 16);
  for (int i = 0; i < 8; ++i) REQUIRE(p.a.post(w).ok());
  CHECK(p.a.send_credits() == 0);
  CHECK(p.a.post(w).status == post_status::sq_full);
  const auto got = collect(x.cq, 3, 200);
  CHECK(wr_ids_of(got) == std::vector<std::uint64_t>{5, 5});  // the 4th and the 8th
  CHECK(p.a.send_credits() == 8);
  CHECK(static_cast<unsigned char>(dst.data()[16]) == 0xab);
  CHECK(static_cast<unsigned char>(dst.data()[31]) == 0xab);
  CHECK(static_cast<unsigned char>(dst.data()[32]) == 0);
}

TEST_CASE_FIXTURE(two_regions, "needs_receive() is true for a prepared SEND, false for a WRITE") {
  auto p = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto s = p.a.prepare(op::send_imm<>{src.local(0, 8), 5}, 1);
  auto w = p.a.prepare(op::write{src.local(0, 8), dst.remote()}, 2);
  CHECK(s.needs_receive());
  CHECK_FALSE(w.needs_receive());
}

TEST_CASE_FIXTURE(two_regions, "post(w, wr_id) gives the prepared WR a new wr_id, refused when it uses bit 63") {
  auto p = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto w = p.a.prepare(op::write{src.local(0, 8), dst.remote()}, 1);
  REQUIRE(p.a.post(w).ok());
  REQUIRE(p.a.post(w, 2).ok());
  REQUIRE(p.a.post(w).ok());  // keeps 2
  CHECK(p.a.post(w, std::uint64_t{1} << 63).status == post_status::bad_wr_id);
  CHECK(w.wr_id() == 2);
  CHECK(wr_ids_of(collect(x.cq, 4, 200)) == std::vector<std::uint64_t>{1, 2, 2});
}

TEST_CASE_FIXTURE(two_regions, "a prepared send asked signaled is signaled on every post") {
  auto p = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto quiet = p.a.prepare(op::write{src.local(0, 8), dst.remote()}, 1);
  auto loud = p.a.prepare(op::write{src.local(0, 8), dst.remote()}, 2, send_flags::signaled);
  REQUIRE(p.a.post(quiet).ok());
  REQUIRE(p.a.post(loud).ok());
  REQUIRE(p.a.post(quiet).ok());
  REQUIRE(p.a.post(loud).ok());
  CHECK(wr_ids_of(collect(x.cq, 3, 200)) == std::vector<std::uint64_t>{2, 2});
  CHECK(p.a.send_credits() == 8);
}

TEST_CASE_FIXTURE(two_regions, "a small send is prepared inline when the queue pair takes it, and the data is read at post") {
  auto p = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8, 1, 1, 64});
  auto w = p.a.prepare(op::write{src.local(0, 8), dst.remote()}, 1);
  CHECK(w.is_inline());
  std::memcpy(src.data(), "prepared", 8);
  REQUIRE(p.a.post(w).ok());
  REQUIRE(collect(x.cq, 1).size() == 1);
  CHECK(std::memcmp(dst.data(), "prepared", 8) == 0);
}

TEST_CASE_FIXTURE(inline_pair, "a WR prepared with send_flags::no_auto_inline is not inline, and the flag stays in rdmakit") {
  auto asked = p.a.prepare(op::write{unregistered, dst.remote()}, 1, send_flags::no_auto_inline | send_flags::inline_data);
  auto plain = p.a.prepare(op::write{unregistered, dst.remote()}, 2, send_flags::no_auto_inline);
  CHECK(asked.is_inline());
  CHECK_FALSE(plain.is_inline());
  REQUIRE(p.a.post(asked).ok());
  REQUIRE(p.a.post(plain).ok());  // read through lkey 0, which no region has
  const auto r = collect(x.cq, 2);
  REQUIRE(r.size() == 2);
  CHECK(r[0].status == wc_status::success);
  CHECK(r[1].status == wc_status::loc_prot_err);
  CHECK_FALSE(has_any(flag_recording::seen, send_flags::no_auto_inline));
}

TEST_CASE_FIXTURE(two_regions, "a prepared WR the device refuses leaves the credits and the signaling run as they were") {
  // Prepared inline on a queue pair that takes 64 inline bytes, posted on one that takes none.
  auto wide = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8, 1, 1, 64});
  auto narrow = make_pair<rc, signal_every<4>>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto inl = wide.a.prepare(op::write{src.local(0, 32), dst.remote()}, 9);
  REQUIRE(inl.is_inline());
  auto plain = narrow.a.prepare(op::write{src.local(0, 32), dst.remote()}, 1);
  for (int i = 0; i < 3; ++i) REQUIRE(narrow.a.post(plain).ok());
  REQUIRE(narrow.a.unsignaled_run() == 3);
  const auto r = narrow.a.post(inl);  // would have been the signaled 4th
  CHECK(r.status == post_status::backend_error);
  CHECK(r.rule == post_rule::inline_size);
  CHECK(narrow.a.send_credits() == 5);
  CHECK(narrow.a.unsignaled_run() == 3);
  REQUIRE(narrow.a.post(plain).ok());  // the 4th after all, signaled
  CHECK(narrow.a.unsignaled_run() == 0);
  CHECK(wr_ids_of(collect(x.cq, 2, 200)) == std::vector<std::uint64_t>{1});
  CHECK(narrow.a.send_credits() == 8);
}

// Under signal_manual a prepared WR is posted with one compare while more than one slot
// is free (queue_pair::post): the WR that takes the last free slot must still be
// signaled (else the queue fills with WRs no completion frees), and a device refusal,
// a failed queue pair and an empty handle still refused.
TEST_CASE_FIXTURE(two_regions, "signal_manual: a prepared WR signals the last free slot and is refused as any post") {
  auto wide = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4, 1, 1, 64});
  auto p = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{4, 4});
  auto w = p.a.prepare(op::write{src.local(0, 8), dst.remote()}, 3);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 4; ++i) REQUIRE(p.a.post(w).ok());
    CHECK(p.a.send_credits() == 0);
    CHECK(p.a.post(w).status == post_status::sq_full);
    CHECK(wr_ids_of(collect(x.cq, 2, 200)) == std::vector<std::uint64_t>{3});  // the 4th only
    CHECK(p.a.send_credits() == 4);
  }
  auto inl = wide.a.prepare(op::write{src.local(0, 32), dst.remote()}, 9);
  REQUIRE(inl.is_inline());
  const auto r = p.a.post(inl);  // two free slots and more: the one-compare path
  CHECK(r.status == post_status::backend_error);
  CHECK(r.rule == post_rule::inline_size);
  CHECK(p.a.send_credits() == 4);
  auto other_pd = x.dev.create_pd();
  auto foreign = other_pd.allocate<rw_access>(64);
  auto bad = p.a.prepare(op::write{foreign.local(0, 8), dst.remote()}, 2, send_flags::signaled);  // LOC_PROT_ERR
  REQUIRE(p.a.post(bad).ok());
  REQUIRE(collect(x.cq, 1).size() == 1);
  CHECK(p.a.post(w).status == post_status::qp_error);
  auto moved = std::move(p.a);
  CHECK(p.a.post(w).status == post_status::empty_handle);
}

// signal_manual's usual post of a prepared WR writes no flag: the WR rests unsignaled
// between posts, so a signaled post, taken or refused, puts its flags back.
TEST_CASE_FIXTURE(two_regions, "a prepared WR posted signaled rests unsignaled: the next quiet post asks no completion") {
  auto manual = make_pair<rc, signal_manual>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8, 1, 1, 64});
  auto every = make_pair<rc, signal_every<2>>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8, 1, 1, 64});
  auto narrow = make_pair<rc, signal_every<2>>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto w = manual.a.prepare(op::write{src.local(0, 32), dst.remote()}, 4);
  REQUIRE(w.is_inline());
  REQUIRE(every.a.post(w).ok());
  REQUIRE(every.a.post(w).ok());  // signaled
  CHECK(wr_ids_of(collect(x.cq, 2, 200)) == std::vector<std::uint64_t>{4});
  REQUIRE(manual.a.post(w).ok());
  CHECK(collect(x.cq, 1, 200).empty());
  auto plain = narrow.a.prepare(op::write{src.local(0, 32), dst.remote()}, 5);
  REQUIRE(narrow.a.post(plain).ok());
  const auto r = narrow.a.post(w);  // signaled, and refused: inline where none is taken
  CHECK(r.status == post_status::backend_error);
  CHECK(r.rule == post_rule::inline_size);
  REQUIRE(manual.a.post(w).ok());
  CHECK(collect(x.cq, 1, 200).empty());
  CHECK(manual.a.send_credits() == 6);
}

TEST_CASE_FIXTURE(two_regions, "a prepared WR on an empty or failed queue pair is refused with the reason") {
  auto p = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8});
  auto w = p.a.prepare(op::write{src.local(0, 8), dst.remote()}, 1);
  auto other_pd = x.dev.create_pd();
  auto foreign = other_pd.allocate<rw_access>(64);
  auto bad = p.a.prepare(op::write{foreign.local(0, 8), dst.remote()}, 2);  // LOC_PROT_ERR
  REQUIRE(p.a.post(bad).ok());
  REQUIRE(collect(x.cq, 1).size() == 1);
  CHECK(p.a.post(w).status == post_status::qp_error);
  auto moved = std::move(p.a);
  CHECK(p.a.post(w).status == post_status::empty_handle);
}

TEST_CASE_FIXTURE(two_regions, "prepare is a setup call: bad input is a usage_error naming it") {
  auto p = make_pair<rc, signal_all>(x.pd, x.cq, y.pd, y.cq, qp_cap{8, 8, 2, 2, 0});
  CHECK_THROWS_WITH_AS((void)p.a.prepare(op::write{src.local(0, 8), dst.remote()}, std::uint64_t{1} << 63),
                       doctest::Contains("bit 63"), usage_error);
  const local_buffer two[2] = {src.local(0, 8), src.local(8, 8)};
  CHECK_THROWS_WITH_AS((void)p.a.prepare(op::write{std::span<const local_buffer>(two), dst.remote()}, 1),
                       doctest::Contains("qp.prepare<2>"), usage_error);
  // More bytes than the remote descriptor: every post would write past it.
  CHECK_THROWS_WITH_AS((void)p.a.prepare<2>(op::write{std::span<const local_buffer>(two), dst.remote().sub(0, 12)}, 1),
                       doctest::Contains("remote_region holds 12"), usage_error);
  CHECK_THROWS_WITH_AS((void)p.a.prepare(op::read{src.local(0, 16), dst.remote().sub(8, 8)}, 1),
                       doctest::Contains("moves 16 bytes"), usage_error);
  // One buffer above 2 GiB (only lists were summed: prepare<1> took it, an audit). No
  // region that large here: prepare reads no key, and refuses it first.
  const local_buffer huge{src.local().addr, (std::uint32_t{1} << 31) + 1, src.lkey()};
  const auto far = remote_region<access::remote_write>::unchecked(0x10000, 1, std::uint64_t{1} << 32);
  CHECK_THROWS_WITH_AS((void)p.a.prepare(op::write{huge, far}, 1), doctest::Contains("more than 2 GiB"), usage_error);
  auto w2 = p.a.prepare<2>(op::write{std::span<const local_buffer>(two), dst.remote().sub(0, 16)}, 1);
  REQUIRE(p.a.post(w2).ok());
  REQUIRE(collect(x.cq, 1).size() == 1);
  auto moved = std::move(p.a);
  CHECK_THROWS_AS((void)p.a.prepare(op::write{src.local(0, 8), dst.remote()}, 1), usage_error);
}
