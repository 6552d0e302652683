// The umbrella header is self-sufficient and gives the whole policy layer.
#include <rdmakit/rdmakit.hpp>
// Backends come separately.
#include <rdmakit/backends/mock.hpp>

#include <doctest/doctest.h>

TEST_CASE("rdmakit.hpp: one include for the library, any backend") {
  using B = rdmakit::backends::mock;
  rdmakit::mock::fabric fab;
  rdmakit::device<B> dev(fab, "");
  auto pd = dev.create_pd();
  auto cq = dev.create_cq<rdmakit::adaptive<>>(16);
  auto qp = pd.create_qp<rdmakit::rc, rdmakit::signal_every<4>>(cq, rdmakit::static_caps<4, 4>{});
  static_assert(decltype(qp)::state == rdmakit::qp_state::init);
  auto live = std::move(qp).connect(qp.local_endpoint());
  static_assert(decltype(live)::state == rdmakit::qp_state::rts);
  CHECK(live.query_state() == rdmakit::qp_state::rts);
}
