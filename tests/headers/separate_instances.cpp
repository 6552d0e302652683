// A user's translation unit in separate compilation (RDMAKIT_SEPARATE_COMPILATION) that
// makes, connects and destroys queue pairs on both shipped backends and waits on their
// CQ: the backend-generic cold code it calls (detail/backend_instances.hpp) must be
// declared extern here, whichever header comes first (separate_instances.sh looks at
// the object's symbols). RDMAKIT_TEST_BACKEND_FIRST puts the backends' headers first.
#if defined(RDMAKIT_TEST_BACKEND_FIRST)
#include <rdmakit/backends/mock.hpp>
#if defined(RDMAKIT_HAVE_IBVERBS)
#include <rdmakit/backends/ibverbs.hpp>
#endif
#include <rdmakit/rdmakit.hpp>
#else
#include <rdmakit/rdmakit.hpp>
#include <rdmakit/backends/mock.hpp>
#if defined(RDMAKIT_HAVE_IBVERBS)
#include <rdmakit/backends/ibverbs.hpp>
#endif
#endif

#include <string>
#include <utility>

template <class B>
int use(const std::string& name) {
  rdmakit::device<B> dev(name);
  auto pd = dev.create_pd();
  auto cq = dev.create_cq(64);
  auto a = rdmakit::create_qp<rdmakit::rc>(pd, cq, rdmakit::qp_cap{8, 8});
  auto b = rdmakit::create_qp<rdmakit::rc>(pd, cq, rdmakit::qp_cap{8, 8});
  const auto eb = b.local_endpoint();
  auto c = std::move(a).connect(eb);
  auto r = cq.wait_for(1, [](const rdmakit::completion<B>&) {});
  return r.count() + c.gid_index();
}

int use_all(const std::string& name) {
  int n = use<rdmakit::backends::mock>(name);
#if defined(RDMAKIT_HAVE_IBVERBS)
  n += use<rdmakit::backends::ibverbs>(name);
#endif
  return n;
}
