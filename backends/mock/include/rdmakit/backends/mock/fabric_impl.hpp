#pragma once
// Definitions of rdmakit::mock::fabric (fabric.hpp): building the devices, the
// process default fabric, the clock controls and fault injection.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/mock/clock.hpp>
#include <rdmakit/backends/mock/fabric.hpp>
#include <rdmakit/detail/algorithm.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

inline constexpr std::uint32_t gid_table_len = 16;

inline gid_entry make_gid(const gid& g, std::uint32_t index, gid_type t) { return {g, index, t, true}; }

// The longest latency or delay the simulated clock takes (its nanoseconds are 64 bits;
// a longer one would wrap): a year.
inline constexpr std::chrono::nanoseconds longest_wait = std::chrono::hours(24 * 365);

// Refuses what the mock cannot simulate, at construction, instead of wrapping it.
inline void check_wait(const char* what, std::chrono::nanoseconds d) {
  if (d < std::chrono::nanoseconds::zero() || d > longest_wait)
    throw usage_error(::rdmakit::detail::cat("mock::fabric: ", what, " = ", d.count(),
                                             " ns is out of range: give 0 up to a year of simulated time"));
}
// A port's MTUs, GID entries and LID: what query_port would report, refused when no
// device could (a GID the table cannot hold, an MTU that is none, a LID taken twice).
inline void check_port(const fabric_config& c, std::size_t di, std::size_t pi) {
  using ::rdmakit::detail::cat;
  const auto& d = c.devices[di];
  const auto& p = d.ports[pi];
  const std::string where = cat("mock::fabric: device ", d.name, " port ", pi + 1, ": ");
  if (p.layer != link_layer::ethernet && p.layer != link_layer::infiniband)
    throw usage_error(cat(where, "port_config::layer = ", static_cast<unsigned>(p.layer),
                          " is not one the mock simulates: give link_layer::ethernet (RoCE) or "
                          "link_layer::infiniband"));
  for (auto [name, m] : {std::pair{"max_mtu", p.max_mtu}, std::pair{"active_mtu", p.active_mtu}})
    if (mtu_bytes(m) == 0)
      throw usage_error(cat(where, "port_config::", name, " = ", static_cast<std::uint32_t>(m),
                            " is not an MTU: give mtu::mtu_256 to mtu::mtu_4096"));
  if (p.active_mtu > p.max_mtu)
    throw usage_error(cat(where, "port_config::active_mtu (", mtu_bytes(p.active_mtu), " bytes) is above its max_mtu (",
                          mtu_bytes(p.max_mtu), " bytes): a port runs at most at its largest MTU"));
  for (std::size_t i = 0; i < p.gids.size(); ++i) {
    if (p.gids[i].index >= gid_table_len)
      throw usage_error(cat(where, "port_config::gids holds index ", p.gids[i].index, ": the GID table has ",
                            gid_table_len, " entries (0..", gid_table_len - 1, ")"));
    // valid is false by default: an entry left so (gid_entry{.value = g, .index = 3}), or
    // an empty slot copied from query_gid, is neither silently a GID nor silently none.
    if (!p.gids[i].valid)
      throw usage_error(cat(where, "port_config::gids holds index ", p.gids[i].index,
                            " with valid = false: set valid = true for a GID there, or leave the entry out for an "
                            "empty slot"));
    for (std::size_t j = 0; j < i; ++j)
      if (p.gids[j].index == p.gids[i].index)
        throw usage_error(cat(where, "port_config::gids holds index ", p.gids[i].index,
                              " twice: give each entry its own index"));
  }
  for (const auto& g : p.gids)
    if (g.type != gid_type::ib && g.type != gid_type::roce_v1 && g.type != gid_type::roce_v2)
      throw usage_error(cat(where, "port_config::gids holds index ", g.index, " of type ",
                            static_cast<std::uint32_t>(g.type),
                            ", which is none: give gid_type::ib, gid_type::roce_v1 or gid_type::roce_v2"));
  if (p.layer == link_layer::ethernet && p.lid != 0)
    throw usage_error(cat(where, "port_config::lid = ", p.lid,
                          " on an Ethernet (RoCE) port, which has no LID (RoCE addresses by GID): leave lid 0"));
  if (p.layer != link_layer::infiniband || p.lid == 0) return;
  if (p.lid >= 0xc000)
    throw usage_error(cat(where, "port_config::lid = ", ::rdmakit::detail::hex(p.lid),
                          " is not a unicast LID: give 0x1 to 0xbfff, or 0 to have one assigned"));
  for (std::size_t dj = 0; dj <= di; ++dj)
    for (std::size_t pj = 0; pj < (dj == di ? pi : c.devices[dj].ports.size()); ++pj) {
      const auto& q = c.devices[dj].ports[pj];
      if (q.layer == link_layer::infiniband && q.lid == p.lid)
        throw usage_error(cat(where, "port_config::lid = ", ::rdmakit::detail::hex(p.lid), " is also device ",
                              c.devices[dj].name, " port ", pj + 1,
                              "'s: packets for it would go to one of the two; give each port its own LID"));
    }
}
inline void check_config(const fabric_config& c) {
  using ::rdmakit::detail::cat;
  // Enumerations given a value they do not name would be silently something else.
  if (c.profile != device_profile::spec && c.profile != device_profile::rxe)
    throw usage_error(cat("mock::fabric: fabric_config::profile = ", static_cast<int>(c.profile),
                          " is no device_profile: give device_profile::spec or device_profile::rxe"));
  if (c.slots != slot_release::on_signaled_poll && c.slots != slot_release::on_completion)
    throw usage_error(cat("mock::fabric: fabric_config::slots = ", static_cast<int>(c.slots),
                          " is no slot_release: give slot_release::on_signaled_poll or slot_release::on_completion"));
  if (c.clock != clock_mode::automatic && c.clock != clock_mode::wall && c.clock != clock_mode::simulated)
    throw usage_error(cat("mock::fabric: fabric_config::clock = ", static_cast<int>(c.clock),
                          " is no clock_mode: give clock_mode::automatic, clock_mode::wall or clock_mode::simulated"));
  // The default GIDs and IPv4 addresses number the devices in 16 bits (10.hi.port.lo).
  if (c.devices.size() > 65534)
    throw usage_error(cat("mock::fabric: ", c.devices.size(), " devices: at most 65534"));
  for (std::size_t i = 0; i < c.devices.size(); ++i) {
    const auto& d = c.devices[i];
    if (d.limits.num_comp_vectors == 0)
      throw usage_error(cat("mock::fabric: device ", d.name,
                            " has limits.num_comp_vectors = 0: a device has at least one completion vector"));
    if (d.name.empty())
      throw usage_error(::rdmakit::detail::cat("mock::fabric: device ", i,
                                               " has no name: devices are opened by name, give each one"));
    for (std::size_t j = 0; j < i; ++j)
      if (c.devices[j].name == d.name)
        throw usage_error(::rdmakit::detail::cat("mock::fabric: two devices are named '", d.name,
                                                 "': devices are opened by name, so the second could never be; "
                                                 "give each its own"));
    if (d.ports.empty())
      throw usage_error(::rdmakit::detail::cat("mock::fabric: device ", d.name, " has no port: give it at least one"));
    if (d.ports.size() > 255)
      throw usage_error(::rdmakit::detail::cat("mock::fabric: device ", d.name, " has ", d.ports.size(),
                                               " ports: at most 255 (port numbers are 8 bits, from 1)"));
    for (std::size_t p = 0; p < d.ports.size(); ++p) check_port(c, i, p);
  }
  check_wait("fabric_config::latency", c.latency);
  // Wall clock, added to steady_clock::now(): a year at most, as the simulated waits.
  constexpr auto longest_retry = std::chrono::duration_cast<std::chrono::milliseconds>(longest_wait);
  if (c.cm_retry_time.count() < 0 || c.cm_retry_time > longest_retry)
    throw usage_error(::rdmakit::detail::cat("mock::fabric: fabric_config::cm_retry_time = ", c.cm_retry_time.count(),
                                             " ms is out of range: give 0 up to a year"));
  if (c.reuse_qp_numbers && c.profile == device_profile::rxe)
    throw usage_error(
        "mock::fabric: reuse_qp_numbers with device_profile::rxe: rxe leaves a destroyed QP's completions in its "
        "CQ, where a queue pair given its number would take them for its own, so rxe does not reuse numbers soon; "
        "use reuse_qp_numbers with device_profile::spec");
}
inline void check_fault(const fault& f) {
  using ::rdmakit::detail::cat;
  if (f.kind != fault_kind::drop && f.kind != fault_kind::duplicate && f.kind != fault_kind::reorder &&
      f.kind != fault_kind::delay)
    throw usage_error(cat("mock::fabric::inject(): fault::kind = ", static_cast<int>(f.kind),
                          " is no fault_kind: give drop, duplicate, reorder or delay"));
  if (!(f.probability >= 0.0 && f.probability <= 1.0)) {
    char p[32];
    std::snprintf(p, sizeof p, "%g", f.probability);
    throw usage_error(::rdmakit::detail::cat("mock::fabric::inject(): fault::probability = ", std::string_view(p),
                                             " is not a probability: give 0 to 1"));
  }
  check_wait("fault::delay", f.delay);
}

// A GID on two ports would take the other's packets (route() picks the first); one
// port may list a GID twice (RoCE v1 and v2 entries).
inline void check_unique_gids(const fabric_state& f) {
  for (std::size_t d = 0; d < f.devices.size(); ++d)
    for (std::size_t p = 0; p < f.devices[d].ports.size(); ++p)
      for (const auto& g : f.devices[d].ports[p].gids) {
        if (!g.valid) continue;
        for (std::size_t e = 0; e <= d; ++e)
          for (std::size_t q = 0; q < (e == d ? p : f.devices[e].ports.size()); ++q)
            for (const auto& h : f.devices[e].ports[q].gids)
              if (h.valid && h.value == g.value)
                throw usage_error(::rdmakit::detail::cat(
                    "mock::fabric: device ", f.devices[d].cfg.name, " port ", p + 1, ": GID ", g.value.to_string(),
                    " (index ", g.index, ") is also device ", f.devices[e].cfg.name, " port ", q + 1,
                    "'s: packets for it would go to one of the two; give each port its own GIDs"));
      }
}

inline bool lid_taken(const std::vector<device_config>& devs, std::uint16_t lid) {
  for (const auto& d : devs)
    for (const auto& p : d.ports)
      if (p.layer == link_layer::infiniband && p.lid == lid) return true;
  return false;
}

inline void build_devices(fabric_state& f) {
  auto devs = f.cfg.devices.empty() ? default_devices() : f.cfg.devices;
  std::uint16_t next_lid = 1;
  for (std::uint32_t d = 0; d < devs.size(); ++d) {
    device_rt dev;
    dev.cfg = devs[d];
    dev.index = d;
    dev.cfg.limits.phys_port_cnt = static_cast<std::uint8_t>(dev.cfg.ports.size());
    for (std::uint32_t p = 0; p < dev.cfg.ports.size(); ++p) {
      port_rt port;
      port.cfg = dev.cfg.ports[p];
      port.up = port.cfg.up;
      port.gids.resize(gid_table_len);
      for (std::uint32_t i = 0; i < gid_table_len; ++i) port.gids[i].index = i;
      const auto host = static_cast<std::uint16_t>(d + 1);  // (check_config: below 65535)
      gid link_local;
      link_local.raw[0] = 0xfe;
      link_local.raw[1] = 0x80;
      link_local.raw[8] = 0x02;
      link_local.raw[13] = static_cast<std::uint8_t>(p + 1);
      link_local.raw[14] = static_cast<std::uint8_t>(host >> 8);
      link_local.raw[15] = static_cast<std::uint8_t>(host);
      if (port.cfg.layer == link_layer::infiniband) {
        if (port.cfg.lid) {
          port.lid = port.cfg.lid;
        } else {  // the next LID no port asked for (check_config: those are unique)
          while (lid_taken(devs, next_lid)) ++next_lid;
          port.lid = next_lid++;
        }
        if (port.cfg.gids.empty()) port.gids[0] = make_gid(link_local, 0, gid_type::ib);
      } else if (port.cfg.gids.empty()) {
        port.gids[0] = make_gid(link_local, 0, gid_type::roce_v2);
        port.gids[1] = make_gid(gid::from_ipv4(10, static_cast<std::uint8_t>(host >> 8), static_cast<std::uint8_t>(p),
                                               static_cast<std::uint8_t>(host)),
                                1, gid_type::roce_v2);
      }
      for (const auto& g : port.cfg.gids)
        if (g.index < gid_table_len) port.gids[g.index] = {g.value, g.index, g.type, true};
      dev.ports.push_back(std::move(port));
    }
    f.devices.push_back(std::move(dev));
  }
  check_unique_gids(f);
}

}  // namespace mock::detail

// ---------------------------------------------------------------- fabric

namespace mock {

RDMAKIT_DECL fabric::fabric(fabric_config config) : state_(rdmakit::detail::make_shared_owner<detail::fabric_state>()) {
  detail::check_config(config);
  state_->cfg = std::move(config);
  if (state_->cfg.profile == device_profile::rxe) state_->cfg.slots = slot_release::on_completion;
  state_->rng.seed(state_->cfg.seed);
  detail::build_devices(*state_);
  // Following the wall clock from here: simulated time is the wall time since now.
  if (state_->cfg.clock == clock_mode::wall) detail::start_pacing(*state_, std::chrono::steady_clock::now());
}

// Devices opened from the fabric hold its state (context_obj::keep): nothing to do here.
RDMAKIT_DECL fabric::~fabric() = default;

RDMAKIT_DECL fabric& default_fabric() {
  // Made once (thread-safe), never destroyed: devices and objects may outlive static
  // destruction, and no other fabric ever takes its place.
  static fabric* const the_default = new fabric();
  return *the_default;
}

RDMAKIT_DECL std::chrono::nanoseconds fabric::now() const {
  std::lock_guard lk(state_->mu);
  return std::chrono::nanoseconds(state_->now);
}

RDMAKIT_DECL void fabric::advance(std::chrono::nanoseconds by) {
  if (by < std::chrono::nanoseconds::zero())
    throw usage_error(::rdmakit::detail::cat("mock::fabric::advance(", by.count(),
                                             " ns): the simulated clock does not go back; give 0 or more"));
  std::lock_guard lk(state_->mu);
  // now() is nanoseconds: past their max() the clock would read negative, then wrap.
  // advance() stops at half of it, so traffic after it (a timer, a retry, a wire
  // latency: each well under a day) never takes the clock there.
  const auto end = static_cast<detail::clock_ns>(std::chrono::nanoseconds::max().count() / 2);
  const detail::clock_ns room = state_->now < end ? end - state_->now : 0;
  if (static_cast<detail::clock_ns>(by.count()) > room)
    throw usage_error(::rdmakit::detail::cat("mock::fabric::advance(", by.count(), " ns): the simulated clock is at ",
                                             state_->now, " ns and stops at half of nanoseconds::max() (", end,
                                             " ns, 146 years: the rest is left to what traffic schedules after): "
                                             "give at most ",
                                             room, " ns"));
  detail::run_until(*state_, state_->now + static_cast<detail::clock_ns>(by.count()));
  // Paced, the clock goes on following the wall clock from the new time: without this,
  // what falls due after it would wait `by` of wall time first.
  if (state_->paced) state_->sim_base += static_cast<detail::clock_ns>(by.count());
}

// A thread that only injects faults or flips ports uses the fabric too: while it does,
// simulated time follows the wall clock (clock.hpp, touch), or the thread that posts
// would spend a retry budget in an instant while a port is down for milliseconds.
RDMAKIT_DECL void fabric::inject(const fault& f) {
  detail::check_fault(f);
  std::lock_guard lk(state_->mu);
  detail::touch(*state_);
  state_->faults.push_back(f);
}

RDMAKIT_DECL void fabric::clear_faults() {
  std::lock_guard lk(state_->mu);
  detail::touch(*state_);
  state_->faults.clear();
}

RDMAKIT_DECL void fabric::set_port_up(std::string_view device, std::uint8_t port, bool up) {
  std::lock_guard lk(state_->mu);
  detail::touch(*state_);
  for (auto& d : state_->devices) {
    if (d.cfg.name != device) continue;
    if (port < 1 || port > d.ports.size())
      throw verbs_error("mock::fabric::set_port_up", EINVAL,
                        ::rdmakit::detail::cat("no port ", port, " on ", d.cfg.name));
    if (d.ports[port - 1].removed)
      throw verbs_error("mock::fabric::set_port_up", ENODEV,
                        ::rdmakit::detail::cat(d.cfg.name, " was removed (fabric::remove_device): its ports stay down"));
    if (d.ports[port - 1].up == up) return;
    d.ports[port - 1].up = up;
    async_event ev;
    ev.type = up ? async_event_type::port_active : async_event_type::port_err;
    ev.port_num = port;
    detail::post_async(*state_, d.index, ev);
    return;
  }
  throw verbs_error("mock::fabric::set_port_up", ENODEV, ::rdmakit::detail::cat("no mock device named '", device, "'"));
}

RDMAKIT_DECL void fabric::set_arm_hook(std::function<void(const void*)> hook) {
  std::lock_guard lk(state_->mu);
  state_->arm_hook = std::move(hook);
}

RDMAKIT_DECL std::uint64_t fabric::packets_sent() const {
  std::lock_guard lk(state_->mu);
  return state_->packets;
}

}  // namespace mock
RDMAKIT_END_NAMESPACE
