#pragma once
// Shared setup for the policy-layer tests: a fresh mock fabric with two RoCE devices
// ("mock0", "mock1"), one open device, PD and CQ per side, and helpers to pump a CQ.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <vector>

namespace policy_test {

using B = rdmakit::backends::mock;
using namespace rdmakit;
constexpr auto rw_access = access::local_write | access::remote_read | access::remote_write;
constexpr auto all_access = rw_access | access::remote_atomic;

struct side {
  device<B> dev;
  protection_domain<B> pd;
  completion_queue<B> cq;
  explicit side(const char* name, int cq_entries = 1024)
      : dev(name), pd(dev.create_pd()), cq(dev.create_cq(cq_entries)) {}
};

/// A copy of a completion's fields (the view points into a batch that is reused).
struct seen {
  std::uint64_t wr_id;
  wc_status status;
  wc_opcode op;
  std::uint32_t byte_len;
  std::uint32_t qp_num;
  bool recv;
  std::uint32_t imm;
  bool has_imm;
  std::uint32_t payload_offset;
};
inline seen copy(const completion<B>& c) {
  return {c.wr_id(), c.status(), c.opcode(), c.byte_len(), c.qp_num(), c.is_recv(), c.imm(), c.has_imm(),
          c.payload_offset()};
}

/// Polls `cq` until `n` completions were seen (or a simulated-time-free spin limit).
template <class CQ>
std::vector<seen> collect(CQ& cq, std::size_t n, int max_polls = 10000) {
  std::vector<seen> out;
  for (int i = 0; i < max_polls && out.size() < n; ++i)
    (void)cq.poll([&](const completion<B>& c) { out.push_back(copy(c)); });
  return out;
}

}  // namespace policy_test
