#pragma once
/// Control plane of the mock HCA: the fabric of devices and ports, its simulated
/// clock, and fault injection. Tests configure it; the data path never sees it.
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/function.hpp>
#include <rdmakit/detail/owning_ptr.hpp>
#include <rdmakit/types.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace mock {

namespace detail {
class fabric_state;
}

/// One port of a mock device: what query_port reports, its GID table, and whether it
/// is plugged in. The defaults are an rxe port on a 1500-byte Ethernet interface.
struct port_config {
  link_layer layer = link_layer::ethernet;  ///< ethernet: RoCE, addressed by GID; infiniband: by LID
  mtu max_mtu = mtu::mtu_4096;              ///< the largest MTU the port supports
  mtu active_mtu = mtu::mtu_1024;  ///< rxe on a 1500-byte netdev reports 1024
  std::uint16_t lid = 0;           ///< InfiniBand only (0 assigns one); an Ethernet port has none: 0
  /// GID table. Empty: like rxe on an IPv4 interface, index 0 is the link-local GID
  /// and index 1 the IPv4-mapped RoCEv2 GID, ::ffff:10.0.P.D for port index P and
  /// device number D - 1 (past 254 devices, D's high byte is the second octet).
  /// Otherwise each entry at its index (0..15, once each, valid = true); the slots
  /// no entry names are empty.
  std::vector<gid_entry> gids{};
  bool up = true;  ///< false: the port starts unplugged (see fabric::set_port_up)
};

/// The per-object limits follow rxe's (32 SGEs, 512 bytes inline, 2^20 WRs, 32767 CQEs,
/// 128 outstanding READs/atomics, 27 SRQ SGEs). The object counts (max_qp, max_cq,
/// max_mr, max_pd, max_ah, max_srq) and max_srq_wr are the mock's own, smaller or larger
/// than what rxe 6.1 reports in the CI guest (max_qp 1048560, max_cq and max_pd 1048576,
/// max_mr 524287, max_ah 32767, max_srq 917503, max_srq_wr 2^20): set them in
/// device_config::limits to model a device's.
inline device_attr default_device_limits() {
  device_attr a;
  a.max_mr_size = ~std::uint64_t{0};
  a.max_qp = 1u << 16;
  a.max_qp_wr = 1u << 20;
  a.max_sge = 32;
  a.max_cq = 1u << 16;
  a.max_cqe = 32767;
  a.max_mr = 1u << 20;
  a.max_pd = 1u << 16;
  a.max_ah = 1u << 16;
  a.max_qp_rd_atom = 128;
  a.max_qp_init_rd_atom = 128;
  a.max_inline_data = 512;
  a.atomics = true;
  a.phys_port_cnt = 1;
  a.num_comp_vectors = 1;  // rxe: one per CPU; one here, so an out-of-range vector is caught
  a.max_srq = 1u << 12;    // (rxe 6.1 reports 917503 SRQs of 2^20 WRs; 27 SGEs as here)
  a.max_srq_wr = 1u << 14;
  a.max_srq_sge = 27;
  return a;
}

/// One mock device: its name, its ports and the limits query_device reports (and the
/// mock enforces, as a real device would).
struct device_config {
  std::string name{};                             ///< what device_names() lists and open_device takes
  std::vector<port_config> ports{port_config{}};  ///< numbered from 1; one RoCE port by default
  device_attr limits = default_device_limits();   ///< rxe's limits by default
};

/// When an unsignaled send WR gives its SQ slot back.
enum class slot_release {
  /// Real HCAs: only when a later signaled WR's completion is polled (the mock's default).
  on_signaled_poll,
  /// rxe: as soon as the WR completes.
  on_completion,
};

/// Which device the mock behaves as where devices differ (docs/semantics.md §13, the
/// deviation table): the specification, or soft-RoCE as the CI guest's kernel runs it.
enum class device_profile {
  /// The specification (docs/semantics.md): the mock's default.
  spec,
  /// rxe (kernel 6.1): its error statuses, GRH flag on RC/UC, slot release on
  /// completion, opcodes and atomic lengths checked late, arming without a channel, a
  /// destroyed QP's completions left in its CQs.
  rxe,
};

/// How a fabric's simulated clock moves (docs/mock.md, "The simulated clock"). Timers (RC
/// ACK timeout, RNR back-off), wire latency and delay faults run on it.
enum class clock_mode {
  /// The default. While one thread uses the fabric, a poll that finds nothing jumps the
  /// clock to the next pending event: a run is deterministic for a seed, and a 67 ms RC
  /// retry takes microseconds. While more than one thread has used the fabric in the last
  /// second, the clock follows the wall clock. A thread counts from its first call into
  /// the fabric (opening a device, creating an object, posting, polling, ...): a thread
  /// started but not yet in its first call does not, so a poll on the first thread still
  /// jumps and can spend an RNR or retry budget before the other thread reposts or
  /// connects. Make the other thread's first call before the first post, or use `wall`.
  automatic,
  /// The clock follows the wall clock from the fabric's construction, whatever the
  /// threads: simulated time is the wall time since then (plus what fabric::advance
  /// added), and a timer falls due when that much wall time has passed, as on a NIC.
  /// For programs whose threads start on their own schedule. Retries and back-offs take
  /// their real time (an RC retry 67 ms by default), and runs are not deterministic.
  wall,
  /// The clock always jumps, however many threads call: deterministic for a seed when the
  /// threads take turns (one hands the fabric to the next) instead of racing. A thread
  /// that acts on its own wall-clock schedule may find a peer's retry budget already
  /// spent, as in `automatic` before it counts.
  simulated,
};

/// The devices an empty fabric_config::devices stands for: two RoCE devices, "mock0"
/// (10.0.0.1) and "mock1" (10.0.0.2), one port each, default limits. Start from them to
/// change one: `cfg.devices = mock::default_devices(); cfg.devices[1].limits.max_qp = 3;`
inline std::vector<device_config> default_devices() {
  std::vector<device_config> d(2);
  d[0].name = "mock0";
  d[1].name = "mock1";
  return d;
}

/// What a fabric is made of and how it behaves: devices, random seed, device profile,
/// SQ slot release, wire latency and clock.
struct fabric_config {
  /// Empty: default_devices().
  std::vector<device_config> devices{};
  std::uint64_t seed = 1;  ///< drives probabilistic faults; same seed, same run
  slot_release slots = slot_release::on_signaled_poll;  ///< on_completion: behave as rxe does
  /// spec, or rxe (which also makes `slots` on_completion).
  device_profile profile = device_profile::spec;
  /// One-way wire latency on the simulated clock. 0: a post completes within the call.
  std::chrono::nanoseconds latency{0};
  /// How long the connection manager retries a connect request that nobody receives (a
  /// port unplugged at either end, see fabric::set_port_up, or a listener whose backlog
  /// is full) before it gives up with UNREACHABLE; wall clock, as the CM's events are.
  /// librdmacm's takes about a minute.
  std::chrono::milliseconds cm_retry_time{200};
  /// A destroyed queue pair's number goes to the next queue pair created (the most
  /// recently freed first), as on devices that allocate QP numbers from a bitmap
  /// (mlx5). False, the default: numbers are given in turn, as rxe's cyclic allocator
  /// gives them, up to 0xFFFFFF and then again from 0x11, past live QPs' numbers. Needs
  /// `profile` spec (a device that cleans the CQ at destroy_qp): rxe
  /// leaves a destroyed QP's completions in the CQ, where a QP given its number would
  /// take them for its own.
  bool reuse_qp_numbers = false;
  /// A WR posted to a QP in ERR after its flushes were written never completes, as rxe
  /// (kernel 6.1) does in some runs (docs/semantics.md §13, posting.post_to_qp_in_err).
  /// False, the default: it is flushed, as the specification says.
  bool lose_posts_in_error = false;
  /// How the simulated clock moves: automatic (the default: jumps while one thread uses
  /// the fabric, follows the wall clock while several do), wall (follows the wall clock
  /// from construction) or simulated (always jumps). See clock_mode.
  clock_mode clock = clock_mode::automatic;
};

/// What a fault does to the messages it hits.
enum class fault_kind {
  drop,       ///< the message is lost (UC/UD; RC: retransmitted, so only delays it)
  duplicate,  ///< the message arrives twice
  reorder,    ///< the message arrives after the next one from the same QP (which is not held itself)
  delay,      ///< the message arrives `delay` later on the simulated clock
};

/// A fault applied to messages sent by one QP (or any QP when `src_qp_num` is 0).
struct fault {
  fault_kind kind = fault_kind::drop;  ///< what happens to the messages hit
  std::uint32_t src_qp_num = 0;        ///< the sending QP whose messages it hits; 0: any QP
  std::uint32_t count = 1;             ///< how many matching messages it hits; 0 = unlimited
  /// Chance per matching message (uses the seed); drop: per packet, so a message of n
  /// packets is lost with 1 - (1-p)^n, as on a lossy link.
  double probability = 1.0;
  std::chrono::nanoseconds delay{0};   ///< fault_kind::delay: how much later the message arrives
};

/// A set of mock devices, their ports, a simulated clock and the faults injected into
/// its wire. A fabric is an object that devices are opened from, passed explicitly:
///
///     rdmakit::mock::fabric fab(cfg);
///     device<backends::mock> dev(fab, "mock0");   // or backends::mock::open_device(fab, "mock0")
///
/// A fabric you construct yourself is never used implicitly: the name-only forms
/// (`device<backends::mock> dev("mock0")`, `backends::mock::open_device(name)`,
/// `device_names()`) open from the process default fabric, `default_fabric()`, and
/// from nothing else, whatever other fabrics exist on any thread. Two fabrics (on two
/// threads, say) share no state: each has its own lock, clock, faults and devices.
/// Devices keep their fabric's state alive: the fabric object may be destroyed first,
/// in any order relative to other fabrics and to the devices.
class fabric {
 public:
  /// Builds the devices of `config` (two RoCE devices by default) on a clock at zero.
  explicit fabric(fabric_config config = {});
  ~fabric();
  fabric(const fabric&) = delete;
  fabric& operator=(const fabric&) = delete;

  /// Simulated time. It advances when a poll finds nothing to return while events
  /// are pending (it jumps to the next one; while it follows the wall clock, as far as
  /// the wall clock allows: fabric_config::clock), or when `advance` is called.
  std::chrono::nanoseconds now() const;
  /// Moves the clock forward and runs everything that falls due. A negative `by`, or
  /// one that would take the clock past half of nanoseconds::max() (146 years; the
  /// other half is left to the timers of traffic after it, so now() never wraps), is a
  /// usage_error, the clock unchanged. While the clock follows the wall clock, it goes
  /// on following it from the new time (timers after it are not held back by `by`).
  void advance(std::chrono::nanoseconds by);

  /// Adds a fault; it applies to messages sent from now on, until its count runs out.
  void inject(const fault& f);
  /// Removes every fault injected, spent or not.
  void clear_faults();

  /// Plugs or unplugs a port: an unplugged port drops every packet (RC peers see
  /// RETRY_EXC_ERR); contexts on the device get PORT_ERR / PORT_ACTIVE.
  void set_port_up(std::string_view device, std::uint8_t port, bool up);

  /// Removes a device as `rdma link delete` removes an rxe device: every connection
  /// manager id bound to it (a connection, a request, a listener on one of its
  /// addresses; not one on 0.0.0.0) gets RDMA_CM_EVENT_DEVICE_REMOVAL, and its ports
  /// drop every packet from then on, without PORT_ERR. Its objects stay usable until
  /// they are destroyed, as the kernel waits for them before the device goes. Once:
  /// a second call does nothing, and set_port_up on it is refused.
  void remove_device(std::string_view device);

  /// Called at the start of every req_notify_cq on this fabric, outside its lock,
  /// with the CQ handle: lets a test make a completion land between the last poll and the arm.
  void set_arm_hook(std::function<void(const void* cq)> hook);

  /// Packets put on the wire since the fabric was made (retransmissions included).
  std::uint64_t packets_sent() const;

  /// The engine's state (rdmakit::mock::detail), for the mock's own verbs; tests use
  /// the calls above.
  detail::fabric_state& state() noexcept { return *state_; }
  /// Shared with the contexts opened from this fabric.
  const rdmakit::detail::shared_owner<detail::fabric_state>& shared_state() const noexcept { return state_; }

 private:
  rdmakit::detail::shared_owner<detail::fabric_state> state_;
};

/// The process default fabric (the default configuration: "mock0" and "mock1"), made on
/// first use and never destroyed or replaced, so it outlives static destruction. The
/// same object on every thread; the one-line `device<backends::mock> dev("mock0")`
/// opens from it. Tests that configure, unplug or inject faults should construct their
/// own fabric and open from it explicitly.
fabric& default_fabric();

}  // namespace mock
RDMAKIT_END_NAMESPACE
