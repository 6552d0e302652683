// What a program built with -O2 -Wall -Wextra -Werror compiles of rdmakit: the policy
// layer's inlined data path must not warn in the user's translation unit. Batches of
// one completion (busy_poll<1>, event_driven<1, 1>) matter: GCC's -Warray-bounds sees
// the poll's four-wide status loop over a one-entry array there.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/rdmakit.hpp>

using namespace rdmakit;
using B = backends::mock;

template <polling P>
int reap_all(device<B>& d, protection_domain<B>& pd) {
  auto cq = d.create_cq<P>(16);
  auto qp = pd.create_qp<rc>(cq, qp_cap{4, 4});
  int seen = 0;
  auto count = [&](const completion<B>& c) { seen += c.ok(); };
  seen += cq.poll(count) + cq.poll();
  seen += cq.wait(count, std::chrono::milliseconds{0}).count();
  seen += cq.dispatch(count);
  return seen + static_cast<int>(qp.qp_num());
}

int main() {
  mock::fabric fab;
  device<B> d(fab, "mock0");
  auto pd = d.create_pd();
  return reap_all<busy_poll<1>>(d, pd) + reap_all<event_driven<1, 1>>(d, pd) + reap_all<busy_poll<>>(d, pd) +
         reap_all<adaptive<16, 1>>(d, pd);
}
