#pragma once
// rdmakit-two-node's scenarios: the conformance suite's data-path checks with each end
// of the queue pair on its own host. The server (host a) is the responder, the client
// (host b) the requester; every scenario makes its own PD, MR, CQ and QP on each side
// and meets the peer three times through the TCP exchange: connect, "requester done"
// (or "peer gone", "send posted", as the scenario needs), and the verdicts. Both sides
// print the same line: PASS only when both sides passed. Generic over the backend: the
// same code runs on the mock (both roles in one process) and on rxe between two guests
// (tests/rxe/wire.sh). Expectations that differ between devices come from the
// conformance suite's deviation table, under the profile the caller names.
#include "../pingpong/pingpong.hpp"

#define CONF_DEVIATIONS_TABLE_ONLY
#include "../../tests/conformance/deviations.hpp"

#include <rdmakit/connection.hpp>
#include <rdmakit/rdmakit.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rdmakit_tools {

using namespace rdmakit;

/// What a scenario does; `op` says which operation the requester posts.
enum class two_node_kind {
  data,            ///< the operation succeeds; both sides check data and completions
  rnr_no_retry,    ///< SEND, no receive posted, rnr_retry 0: RNR_RETRY_EXC_ERR
  rnr_recv_later,  ///< SEND, rnr_retry 7, the receive posted after the SEND: success
  peer_destroyed,  ///< the responder's QP is destroyed first: RETRY_EXC_ERR
  peer_in_err,     ///< the responder's QP is moved to ERR first: RETRY_EXC_ERR
  peer_in_reset,   ///< the responder's QP is moved to RESET first: RETRY_EXC_ERR
  bad_rkey,        ///< the requester uses a wrong rkey: REM_ACCESS_ERR, responder ERR
};

enum class two_node_op { send, send_imm, write, write_imm, read, cmp_swap, fetch_add };

struct two_node_scenario {
  std::string name;
  qp_type transport;
  two_node_kind kind;
  two_node_op op;
  std::uint32_t size;  ///< message bytes (atomics: 8)
};

inline constexpr std::uint32_t two_node_small = 64;
/// Ten packets at the path MTU of 1024 the scenarios connect with.
inline constexpr std::uint32_t two_node_large = 10'000;
inline constexpr std::uint32_t two_node_imm = 0x5eed1234;

/// The scenarios, in the order both sides run them.
inline std::vector<two_node_scenario> two_node_scenarios() {
  using k = two_node_kind;
  using o = two_node_op;
  std::vector<two_node_scenario> v;
  auto ops = [&](qp_type t, const char* tn, std::initializer_list<std::pair<o, const char*>> l, bool multi) {
    for (auto [op, n] : l) {
      v.push_back({std::string(tn) + "." + n, t, k::data, op, two_node_small});
      if (multi) v.push_back({std::string(tn) + "." + n + ".multi_packet", t, k::data, op, two_node_large});
    }
  };
  ops(qp_type::rc, "rc",
      {{o::send, "send"}, {o::send_imm, "send_imm"}, {o::write, "write"}, {o::write_imm, "write_imm"},
       {o::read, "read"}},
      true);
  ops(qp_type::rc, "rc", {{o::cmp_swap, "cmp_swap"}, {o::fetch_add, "fetch_add"}}, false);
  v.push_back({"rc.rnr.no_retry", qp_type::rc, k::rnr_no_retry, o::send, two_node_small});
  v.push_back({"rc.rnr.recv_posted_later", qp_type::rc, k::rnr_recv_later, o::send, two_node_small});
  v.push_back({"rc.retry.peer_destroyed", qp_type::rc, k::peer_destroyed, o::send, two_node_small});
  v.push_back({"rc.retry.peer_in_err", qp_type::rc, k::peer_in_err, o::send, two_node_small});
  v.push_back({"rc.retry.peer_in_reset", qp_type::rc, k::peer_in_reset, o::send, two_node_small});
  v.push_back({"rc.bad_rkey.write", qp_type::rc, k::bad_rkey, o::write, two_node_small});
  v.push_back({"rc.bad_rkey.write_imm", qp_type::rc, k::bad_rkey, o::write_imm, two_node_small});
  v.push_back({"rc.bad_rkey.read", qp_type::rc, k::bad_rkey, o::read, two_node_small});
  ops(qp_type::uc, "uc", {{o::send, "send"}, {o::send_imm, "send_imm"}, {o::write, "write"}, {o::write_imm, "write_imm"}},
      true);
  ops(qp_type::ud, "ud", {{o::send, "send"}, {o::send_imm, "send_imm"}}, false);
  return v;
}

/// How long rc.rnr.recv_posted_later's responder waits, RNR NAKs meanwhile, before posting
/// the receive the requester's SEND needs.
inline constexpr std::chrono::milliseconds two_node_rnr_pause{100};
/// The shortest two_node_options::wait that lets every scenario pass: that SEND completes
/// only after the pause, and a completion needs time on a slow link besides.
inline constexpr std::chrono::milliseconds two_node_min_wait = 2 * two_node_rnr_pause;

struct two_node_options {
  std::string device;
  std::uint8_t ib_port = 1;
  std::optional<int> gid_index{};
  bool server = true;
  /// The deviation table's profile the expectations come from: "rxe" on rxe, the mock's own otherwise.
  std::string profile = "rxe";
  /// Only scenarios whose name contains this (both sides must be given the same).
  std::string only;
  /// The longest wait for a completion that should come (at least two_node_min_wait).
  std::chrono::milliseconds wait{10'000};
  /// How long a side watches for a completion that must not come.
  std::chrono::milliseconds quiet{100};
};

struct two_node_result {
  std::string name;
  bool pass = false;
  std::string detail;  ///< why it failed (this side's findings, or "the peer failed")
  std::string line() const { return (pass ? "PASS " : "FAIL ") + name + (detail.empty() ? "" : ": " + detail); }
};

/// The byte at `i` of scenario `seed`'s message.
inline std::byte two_node_byte(std::uint32_t seed, std::size_t i) {
  return static_cast<std::byte>((seed * 37u + static_cast<std::uint32_t>(i) * 11u + (i >> 9)) & 0xff);
}

namespace detail2n {

/// One side's findings in a scenario: every failed check, in words.
struct findings {
  std::string text;
  void fail(const std::string& s) { text += (text.empty() ? "" : "; ") + s; }
  bool ok() const { return text.empty(); }
};

/// Thrown when the two sides no longer run the same step: the run stops there.
struct desync : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <verbs_backend B>
std::string describe(const completion<B>& c) {
  return std::string(c.is_recv() ? "recv" : "send") + " wr_id " + std::to_string(c.wr_id()) + " " +
         std::string(to_string(c.status()));
}

/// Completions until `n` arrived or `limit` passed.
template <verbs_backend B, class CQ>
std::vector<completion<B>> collect(CQ& cq, std::size_t n, std::chrono::milliseconds limit) {
  std::vector<completion<B>> out;
  const auto end = std::chrono::steady_clock::now() + limit;
  while (out.size() < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const auto w = cq.wait([&](const completion<B>& c) { out.push_back(c); }, left);
    if (w.failed()) throw std::runtime_error("polling the CQ failed: " + std::string(std::strerror(w.error())));
  }
  return out;
}

}  // namespace detail2n

/// One scenario on one side. Each side meets the peer exactly three times: connect,
/// the scenario's middle step, and the verdicts (the peer counts on it).
///
///   kind            requester (client)                  responder (server)
///   data            post, check completion | step 2     step 2 | check receive, memory
///   rnr_no_retry    post, RNR_RETRY_EXC_ERR | step 2    step 2 | nothing arrived
///   rnr_recv_later  post | step 2 | success             step 2 | 100 ms, post receive, check
///   peer_*          step 2 | post, RETRY_EXC_ERR        destroy, ERR or RESET | step 2
///   bad_rkey        post, REM_ACCESS_ERR | step 2       step 2 | receives failed or flushed
template <verbs_backend B, transport T, polling P>
two_node_result run_two_node_scenario(const two_node_scenario& sc, std::uint32_t index, const two_node_options& o,
                                      const exchange_fn& exchange, device<B>& dev) {
  using detail2n::findings;
  using k = two_node_kind;
  using o_ = two_node_op;
  constexpr rdmakit::access rights = rdmakit::access::local_write | rdmakit::access::remote_write |
                                     rdmakit::access::remote_read | rdmakit::access::remote_atomic;
  findings f;
  int steps = 0;
  // One meeting with the peer. Each record carries a tag (scenario, step), except the
  // server's first, which carries its MR; a side that finds the peer elsewhere stops the run.
  auto sync = [&](const endpoint& ep, const std::optional<region_descriptor>& mr_desc, const on_peer_fn& cb,
                  bool failed = false) {
    const std::uint64_t tag = std::uint64_t{index} * 4 + static_cast<std::uint64_t>(++steps);
    connection_info local(ep);
    local.region = mr_desc ? *mr_desc : region_descriptor(tag, failed ? 1 : 0, 0, rdmakit::access::none);
    connection_info peer = exchange(local, cb);
    const bool peer_sends_mr = steps == 1 && !o.server;
    if (!peer.region) throw detail2n::desync("the peer's record has no region");
    if (!peer_sends_mr && peer.region->addr != tag)
      throw detail2n::desync("the peer is at step " + std::to_string(peer.region->addr) + ", this side at " +
                             std::to_string(tag));
    return peer;
  };
  auto step = [&] { sync(endpoint{}, std::nullopt, {}); };

  // Outlive the scenario's objects: a QP left in ERR or RESET must stay until the peer has
  // its completion (the verdict step), or the scenario would test a destroyed QP instead.
  std::optional<queue_pair<B, T, signal_all, qp_state::init>> keep_until_verdict;
  std::optional<queue_pair<B, T, signal_all, qp_state::rts>> keep_in_reset;
  try {
    auto pd = dev.create_pd();
    const std::uint32_t cap = sc.size + 64;
    auto mr = pd.template allocate<rights>(cap);
    std::byte* m = mr.data();
    std::memset(m, 0, cap);
    auto cq = dev.template create_cq<P>(32);
    qp_options qo;
    qo.port = o.ib_port;
    qo.gid_index = o.gid_index;
    auto qp = pd.template create_qp<T, signal_all>(cq, qp_cap{8, 8, 1, 1, 0}, qo);
    using live_qp = queue_pair<B, T, signal_all, qp_state::rts>;
    std::optional<live_qp> live;
    std::optional<address_handle<B>> ah;
    const std::uint32_t seed = index;
    const std::uint32_t r = T::recv_offset;  // 40 on UD: the GRH lands first
    constexpr std::uint64_t recv_id = 700, sentinel_id = 701, send_id = 1;
    const bool send_like = sc.op == o_::send || sc.op == o_::send_imm;
    const bool atomic = sc.op == o_::cmp_swap || sc.op == o_::fetch_add;

    connect_options co;
    co.path_mtu = mtu::mtu_1024;
    if (sc.kind == k::rnr_no_retry) co.rnr_retry = 0;
    if (sc.kind == k::rnr_recv_later) co.rnr_retry = 7;  // retried until the receive is there
    const bool peer_gone = sc.kind == k::peer_destroyed || sc.kind == k::peer_in_err || sc.kind == k::peer_in_reset;
    if (peer_gone) {
      co.timeout = 12;  // 17 ms per try, two tries: the scenario ends in well under a second
      co.retry_cnt = 1;
    }
    auto bring_up = [&](const connection_info& p) {
      check_peer_record(p.ep, qp.local_endpoint());
      if constexpr (T::connected) {
        live.emplace(std::move(qp).connect(p.ep, co));
      } else {
        live.emplace(std::move(qp).activate());
        if (!o.server) ah.emplace(pd.create_ah(p.ep, {.port = o.ib_port, .gid_index = live->gid_index()}));
      }
    };
    const endpoint my_ep = qp.local_endpoint();
    auto check_quiet = [&](const char* what) {
      auto extra = detail2n::collect<B>(cq, 1, o.quiet);
      if (!extra.empty()) f.fail(std::string(what) + ": " + detail2n::describe(extra[0]));
    };
    auto check_bytes = [&](std::uint32_t from, const char* what) {
      for (std::uint32_t i = 0; i < sc.size; ++i)
        if (m[from + i] != two_node_byte(seed, i)) {
          f.fail(std::string(what) + " differs at byte " + std::to_string(i));
          return false;
        }
      return true;
    };

    if (o.server) {
      // ---------------------------------------------------------------- responder
      if (sc.op == o_::read)
        for (std::uint32_t i = 0; i < sc.size; ++i) m[i] = two_node_byte(seed, i);
      const std::uint64_t initial = sc.op == o_::cmp_swap ? 5 : 100;
      if (atomic) std::memcpy(m, &initial, 8);
      // A receive for what consumes one; where nothing may consume one, a sentinel that
      // must stay posted (data) or be flushed (bad_rkey: the QP goes to ERR).
      const bool consumes = (send_like || sc.op == o_::write_imm) &&
                            (sc.kind == k::data || sc.kind == k::bad_rkey);
      if (consumes) {
        auto pr = qp.post_recv(mr.local(0, sc.size + r), recv_id);
        if (!pr) f.fail(std::string("post_recv: ") + pr.message());
      }
      if (T::connected && (sc.kind == k::bad_rkey || (sc.kind == k::data && !consumes))) {
        auto pr = qp.post_recv(mr.local(sc.size, 64), sentinel_id);
        if (!pr) f.fail(std::string("post_recv (sentinel): ") + pr.message());
      }
      const connection_info peer = sync(my_ep, region_descriptor(mr.remote()), bring_up);
      if (sc.kind == k::peer_destroyed) live.reset();
      if (sc.kind == k::peer_in_err) {
        keep_until_verdict.emplace(std::move(*live).reset());  // the old QP is kept, in ERR, with it
        live.reset();
      }
      if (sc.kind == k::peer_in_reset) {
        // The typed layer has no way back to RESET (reset() makes a new QP): the backend's own call.
        qp_attr a;
        a.state = qp_state::reset;
        B::modify_qp(live->native(), a, qp_attr_mask::state);
        keep_in_reset.emplace(std::move(*live));
        live.reset();
      }
      step();
      if (sc.kind == k::rnr_recv_later) {
        std::this_thread::sleep_for(two_node_rnr_pause);  // RNR NAKs meanwhile
        auto pr = live->post_recv(mr.local(0, sc.size + r), recv_id);
        if (!pr) f.fail(std::string("post_recv: ") + pr.message());
      }
      if ((sc.kind == k::data && consumes) || sc.kind == k::rnr_recv_later) {
        auto got = detail2n::collect<B>(cq, 1, o.wait);
        if (got.size() != 1) {
          f.fail("no receive completion");
        } else if (const auto& c = got[0]; !c.ok()) {
          f.fail("receive: " + detail2n::describe(c));
        } else {
          const bool imm = sc.op == o_::send_imm || sc.op == o_::write_imm;
          if (c.wr_id() != recv_id) f.fail("receive wr_id " + std::to_string(c.wr_id()));
          const wc_opcode want = sc.op == o_::write_imm ? wc_opcode::recv_rdma_with_imm : wc_opcode::recv;
          if (c.opcode() != want) f.fail("receive opcode " + std::to_string(static_cast<int>(c.opcode())));
          if (c.payload_len() != sc.size) f.fail("byte_len " + std::to_string(c.byte_len()));
          if (c.has_imm() != imm) f.fail(imm ? "no immediate" : "an immediate on a plain message");
          if (imm && c.imm() != two_node_imm) f.fail("immediate " + std::to_string(c.imm()));
          if constexpr (T::type == qp_type::ud) {
            if (c.src_qp() != peer.ep.qpn)
              f.fail("src_qp " + std::to_string(c.src_qp()) + ", the sender is " + std::to_string(peer.ep.qpn));
            if (!c.has_grh()) f.fail("no GRH flag on a UD receive");
          } else {
            const conf::outcome* g = conf::find_expected(conf::ids::grh_flag_rc_uc, o.profile);
            if (!g) f.fail("no deviation row " + std::string(conf::ids::grh_flag_rc_uc) + " for " + o.profile);
            else if (g->grh_flag != conf::tri::either && c.has_grh() != (g->grh_flag == conf::tri::yes))
              f.fail(std::string("GRH flag ") + (c.has_grh() ? "set" : "clear") + " against the " + o.profile + " row");
          }
          check_bytes(r, "the payload");
        }
      }
      if (sc.kind == k::data && sc.op == o_::write) {
        // RC: the requester's completion means the bytes are placed; UC: they may still be on their way.
        const auto end = std::chrono::steady_clock::now() + o.wait;
        auto placed = [&] {
          for (std::uint32_t i = 0; i < sc.size; ++i)
            if (m[i] != two_node_byte(seed, i)) return false;
          return true;
        };
        while (!placed() && std::chrono::steady_clock::now() < end)
          std::this_thread::sleep_for(std::chrono::milliseconds{1});
        check_bytes(0, "the written memory");
      }
      if (sc.kind == k::data && sc.op == o_::read) check_bytes(0, "memory after the READ");
      if (sc.kind == k::data && atomic) {
        std::uint64_t now = 0;
        std::memcpy(&now, m, 8);
        const std::uint64_t want = sc.op == o_::cmp_swap ? 9 : 107;
        if (now != want) f.fail("remote value " + std::to_string(now) + ", expected " + std::to_string(want));
      }
      if (sc.kind == k::data || sc.kind == k::rnr_recv_later) check_quiet("an unexpected completion");
      if (sc.kind == k::rnr_no_retry) check_quiet("a completion with no receive posted");
      if (sc.kind == k::bad_rkey) {
        // The responder's QP goes to ERR: the receive a WRITE_WITH_IMM consumed fails with the
        // deviation table's status, the sentinel is flushed. Memory stays untouched.
        const std::size_t want_n = consumes ? 2 : 1;
        auto got = detail2n::collect<B>(cq, want_n, o.wait);
        if (got.size() != want_n)
          f.fail(std::to_string(got.size()) + " receive completions, expected " + std::to_string(want_n));
        for (const auto& c : got) {
          if (c.wr_id() == recv_id && sc.op == o_::write_imm) {
            const conf::outcome* w = conf::find_expected(conf::ids::write_imm_bad_rkey, o.profile);
            if (!w) f.fail("no deviation row " + std::string(conf::ids::write_imm_bad_rkey) + " for " + o.profile);
            else if (!w->resp.allows(c.status()))
              f.fail("the consumed receive: " + std::string(to_string(c.status())) + ", expected " + w->resp.to_string());
          } else if (c.wr_id() != sentinel_id || c.status() != wc_status::wr_flush_err) {
            f.fail("expected the sentinel receive flushed, got " + detail2n::describe(c));
          }
        }
        if (sc.op != o_::read)
          for (std::uint32_t i = 0; i < sc.size; ++i)
            if (m[i] != std::byte{0}) {
              f.fail("a write with a bad rkey changed memory");
              break;
            }
      }
    } else {
      // ---------------------------------------------------------------- requester
      for (std::uint32_t i = 0; i < sc.size; ++i) m[i] = sc.op == o_::read ? std::byte{0} : two_node_byte(seed, i);
      const connection_info peer = sync(my_ep, std::nullopt, bring_up);
      if (peer_gone) step();  // the responder's QP is destroyed, in ERR or in RESET now
      const region_descriptor& d = *peer.region;
      const std::uint32_t rkey = sc.kind == k::bad_rkey ? d.rkey ^ 0x77700u : d.rkey;
      const auto rw = remote_region<rights>::unchecked(d.addr, rkey, d.length);
      const local_buffer buf = mr.local(0, atomic ? 8 : sc.size);
      post_result pr;
      if constexpr (T::type == qp_type::ud) {
        if (sc.op == o_::send_imm) pr = live->post(op::ud_send_imm{buf, ah->to(peer.ep), two_node_imm}, send_id);
        else pr = live->post(op::ud_send{buf, ah->to(peer.ep)}, send_id);
      } else {
        switch (sc.op) {
          case o_::send: pr = live->post(op::send{buf}, send_id); break;
          case o_::send_imm: pr = live->post(op::send_imm{buf, two_node_imm}, send_id); break;
          case o_::write: pr = live->post(op::write{buf, rw.sub(0, sc.size)}, send_id); break;
          case o_::write_imm: pr = live->post(op::write_imm{buf, rw.sub(0, sc.size), two_node_imm}, send_id); break;
          default:
            if constexpr (T::type == qp_type::rc) {
              if (sc.op == o_::read) pr = live->post(op::read{buf, rw.sub(0, sc.size)}, send_id);
              else if (sc.op == o_::cmp_swap) pr = live->post(op::compare_swap{buf, rw.sub(0, 8), 5, 9}, send_id);
              else pr = live->post(op::fetch_add{buf, rw.sub(0, 8), 7}, send_id);
            }
        }
      }
      if (!pr) f.fail(std::string("post: ") + pr.message());
      if (sc.kind == k::rnr_recv_later) step();  // the responder posts its receive after this
      conf::status_set want{wc_status::success};
      if (sc.kind == k::rnr_no_retry) want = {wc_status::rnr_retry_exc_err};
      if (peer_gone) want = {wc_status::retry_exc_err};
      if (sc.kind == k::bad_rkey) want = {wc_status::rem_access_err};
      auto got = pr ? detail2n::collect<B>(cq, 1, o.wait) : std::vector<completion<B>>{};
      if (pr && got.empty()) f.fail("no send completion");
      if (!got.empty()) {
        const auto& c = got[0];
        if (c.wr_id() != send_id || c.is_recv()) f.fail("unexpected " + detail2n::describe(c));
        if (!want.allows(c.status()))
          f.fail("status " + std::string(to_string(c.status())) + ", expected " + want.to_string());
        if (c.ok()) {
          static constexpr wc_opcode codes[] = {wc_opcode::send,       wc_opcode::send,      wc_opcode::rdma_write,
                                                wc_opcode::rdma_write, wc_opcode::rdma_read, wc_opcode::comp_swap,
                                                wc_opcode::fetch_add};
          if (c.opcode() != codes[static_cast<int>(sc.op)])
            f.fail("send opcode " + std::to_string(static_cast<int>(c.opcode())));
          if (sc.op == o_::read) check_bytes(0, "the data read");
          if (atomic) {
            std::uint64_t old = 0;
            std::memcpy(&old, m, 8);
            const std::uint64_t want_old = sc.op == o_::cmp_swap ? 5 : 100;
            if (old != want_old) f.fail("returned " + std::to_string(old) + ", expected " + std::to_string(want_old));
          }
        }
      }
      // Done before the responder looks (data, bad_rkey, rnr_no_retry).
      if (sc.kind != k::rnr_recv_later && !peer_gone) step();
      if (sc.kind == k::data || sc.kind == k::rnr_recv_later) check_quiet("an unexpected completion");
    }
  } catch (const detail2n::desync&) {
    throw;
  } catch (const std::exception& e) {
    f.fail(std::string("error: ") + e.what());
  }
  // Whatever happened, meet the peer as often as it expects, then trade verdicts.
  bool peer_failed = false;
  try {
    while (steps < 2) step();
    peer_failed = sync(endpoint{}, std::nullopt, {}, !f.ok()).region->rkey != 0;
  } catch (const detail2n::desync&) {
    throw;
  } catch (const std::exception& e) {
    throw detail2n::desync(std::string("exchange with the peer failed: ") + e.what());
  }
  two_node_result res{sc.name, f.ok() && !peer_failed, f.text};
  // "too" when this side failed as well: not a failure of this side caused by the peer.
  if (peer_failed)
    res.detail += std::string(res.detail.empty() ? "the " : "; the ") + (o.server ? "client" : "server") +
                  (res.detail.empty() ? " failed" : " failed too");
  return res;
}

/// Runs every scenario (or those o.only selects) as one side. `print` gets each result as it comes.
template <verbs_backend B, polling P, class Print>
std::vector<two_node_result> run_two_node(const two_node_options& o, const exchange_fn& exchange, device<B> opened,
                                          Print&& print) {
  device<B> dev = opened ? std::move(opened) : device<B>(o.device);
  std::vector<two_node_result> out;
  const auto all = two_node_scenarios();
  std::uint32_t index = 0;
  for (const auto& sc : all) {
    ++index;
    if (!o.only.empty() && sc.name.find(o.only) == std::string::npos) continue;
    two_node_result r;
    try {
      switch (sc.transport) {
        case qp_type::rc: r = run_two_node_scenario<B, rc, P>(sc, index, o, exchange, dev); break;
        case qp_type::uc: r = run_two_node_scenario<B, uc, P>(sc, index, o, exchange, dev); break;
        case qp_type::ud: r = run_two_node_scenario<B, ud, P>(sc, index, o, exchange, dev); break;
      }
    } catch (const detail2n::desync& e) {
      r = {sc.name, false, std::string("stopped: ") + e.what()};
      out.push_back(r);
      print(r);
      return out;  // the sides no longer agree on where they are: the rest cannot run
    }
    out.push_back(r);
    print(r);
  }
  return out;
}

}  // namespace rdmakit_tools
