#pragma once
/// Connection setup through a connection manager (librdmacm's rdma_cm, or the mock's),
/// the alternative to the TCP exchange of connection.hpp: the CM resolves the peer's
/// IP address to a device, port and GID, carries a connect request and its answer with
/// private data, and moves the queue pair it created to RTR and RTS. What comes out is
/// the library's usual `queue_pair<B, T, S, qp_state::rts>`: the data path, signaling
/// and credit ledger are the same as after connect(peer). RC only: rdma_cm's TCP port
/// space gives a connection RC's attributes, which a UC queue pair refuses.
///
///     // passive side
///     cm_listener<B> l(dev, cm_address::parse("10.0.0.1", 7471));
///     auto req = l.next_request(5s);                  // the peer's private data: req.private_data()
///     auto c = std::move(req).accept<rc>(pd, cq, caps, cm_region_data(mr.remote()));
///     // active side
///     auto c = cm_connect<rc>(pd, cq, caps, cm_address::parse("10.0.0.1", 7471));
///     auto dst = c.peer_region()->as<access::remote_write>();  // from the accept's private data
///     if (!c.qp().write(src, dst, 1).ok()) { /* a post_result says why */ }
///
/// Every wait is bounded (cm_options::timeout); every failure is a cm_error saying which
/// step failed and what to do (rejected, with the peer's private data; unreachable;
/// address or route errors). Objects keep what they depend on alive: a queue pair keeps
/// its CM id (and its channel, device, PD and CQs); any order of destruction is safe.
/// Destroying a connection disconnects it (its queue pair, if moved out, goes to ERR).
#include <rdmakit/cm_backend.hpp>
#include <rdmakit/completion_queue.hpp>
#include <rdmakit/connection_info.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/spin_lock.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/device.hpp>
#include <rdmakit/protection_domain.hpp>
#include <rdmakit/qp_options.hpp>
#include <rdmakit/queue_pair.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE

/// Why connection setup through the CM failed. Compare with `e.code() == cm_errc::rejected`.
enum class cm_errc {
  timeout = 1,   ///< no event within cm_options::timeout (a peer that never answers)
  rejected,      ///< the peer rejected (cm_error::private_data: its reason), or nobody listens
  unreachable,   ///< the peer's CM did not answer the CM's retries
  address,       ///< the address could not be resolved to an RDMA device, or bound
  route,         ///< no route to the address
  connect,       ///< another connect failure (CONNECT_ERROR, an unexpected event)
  disconnected,  ///< the peer went away during setup
  system,        ///< the event channel failed (see the message for the errno)
};

namespace detail {
class cm_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rdmakit.cm"; }
  std::string message(int e) const override {
    switch (static_cast<cm_errc>(e)) {
      case cm_errc::timeout: return "timed out";
      case cm_errc::rejected: return "rejected";
      case cm_errc::unreachable: return "peer unreachable";
      case cm_errc::address: return "address error";
      case cm_errc::route: return "route error";
      case cm_errc::connect: return "connect error";
      case cm_errc::disconnected: return "disconnected during setup";
      case cm_errc::system: return "event channel error";
    }
    return "unknown connection manager error";
  }
};
}  // namespace detail

/// The error category of cm_errc.
inline const std::error_category& cm_category() noexcept {
  static const detail::cm_category_impl c;
  return c;
}
/// Makes `e` comparable with cm_error::code().
inline std::error_code make_error_code(cm_errc e) noexcept { return {static_cast<int>(e), cm_category()}; }

/// Thrown by connection setup through the CM: code() is a cm_errc, what() says which
/// step failed and what to do; `event()`, `status()` and `private_data()` are the CM's.
class cm_error : public std::system_error {
 public:
  /// `kind` of failure; `what` says which step and what to do; the CM's event, status and private data.
  cm_error(cm_errc kind, const std::string& what, cm_event_type ev = cm_event_type::none, int status = 0,
           std::vector<std::byte> data = {})
      : std::system_error(make_error_code(kind), what), event_(ev), status_(status), data_(std::move(data)) {}
  /// What failed, as a cm_errc.
  cm_errc kind() const noexcept { return static_cast<cm_errc>(code().value()); }
  /// The event that ended the step (none on a timeout).
  cm_event_type event() const noexcept { return event_; }
  /// The event's status: the reject reason, or a negative errno.
  int status() const noexcept { return status_; }
  /// A reject's private data (the peer's reason), as received.
  const std::vector<std::byte>& private_data() const noexcept { return data_; }

 private:
  cm_event_type event_;
  int status_;
  std::vector<std::byte> data_;
};

/// How connection setup runs: the bound on each wait, and what connect/accept ask.
struct cm_options {
  /// Bound on each step (address, route, the peer's answer, ESTABLISHED). Positive.
  /// Any duration type: one past the range of milliseconds (hours::max()) is no
  /// limit; a finer one is rounded up to whole milliseconds.
  detail::ms_timeout timeout{std::chrono::milliseconds{5000}};
  std::uint8_t responder_resources = 1;  ///< RDMA READs/atomics the peer may have in flight here; RC accept: 0 is refused
  std::uint8_t initiator_depth = 1;      ///< RDMA READs/atomics this side may have in flight; RC accept: 0 is refused
  /// RC transport retries (0..7). 7 means "forever" on rxe: a WR to a peer that died
  /// never completed; 6, as connect_options, fails it with retry_exc_err.
  std::uint8_t retry_count = 6;
  /// RC RNR retries (0..7; 7: forever, as a peer that never posts a receive is waited for).
  std::uint8_t rnr_retry_count = 6;
  bool auto_inline = true;               ///< as qp_options::auto_inline
  /// cm_connect: the local address to connect from (rdma_resolve_addr's source, rping's
  /// -I); 0.0.0.0, the default: the CM picks the one routing to the peer. Port 0: any.
  cm_address source{};
};

/// Private data carrying a region descriptor (28 bytes: fits every CM message), so a
/// peer can RDMA into the region right after ESTABLISHED. Throws exchange_error
/// (invalid_argument) for a region cm_region_from would refuse: one that runs past the
/// end of the address space, or rights other than the remote ones.
inline std::vector<std::byte> cm_region_data(const region_descriptor& r) {
  if ((r.rights & ~remote_access_bits) != access::none)
    throw exchange_error(exchange_errc::invalid_argument,
                         "cm_region_data(): the region's access holds bits other than remote write/read/atomic");
  if (r.length != 0 && r.length - 1 > ~r.addr)
    throw exchange_error(exchange_errc::invalid_argument,
                         detail::cat("cm_region_data(): ", r.length, " bytes at addr ", detail::hex(r.addr),
                                     " run past the end of the address space"));
  std::vector<std::byte> d(28);
  auto put = [&](std::size_t at, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) d[at + static_cast<std::size_t>(i)] = std::byte(v >> (8 * (n - 1 - i)));
  };
  put(0, 0x524b434d, 4);  // "RKCM"
  d[4] = std::byte{1};     // version
  d[5] = std::byte(static_cast<std::uint8_t>(to_underlying(r.rights) & 0xff));
  d[6] = std::byte(static_cast<std::uint8_t>((to_underlying(r.rights) >> 8) & 0xff));
  put(8, r.addr, 8);
  put(16, r.rkey, 4);
  put(20, r.length, 8);
  return d;
}

/// The region descriptor in private data made by cm_region_data; nullopt when the data
/// is something else (padding after the 28 bytes is ignored). Data that is one (its
/// magic) but malformed throws exchange_error, as the TCP exchange's record does:
/// version_mismatch for another layout version; malformed for a region that runs past
/// the end of the address space, or rights other than remote write/read/atomic.
inline std::optional<region_descriptor> cm_region_from(std::span<const std::byte> d) {
  if (d.size() < 28) return std::nullopt;
  auto get = [&](std::size_t at, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(d[at + static_cast<std::size_t>(i)]);
    return v;
  };
  if (get(0, 4) != 0x524b434d) return std::nullopt;
  if (d[4] != std::byte{1})
    throw exchange_error(exchange_errc::version_mismatch,
                         detail::cat("cm_region_from(): the peer's region descriptor is layout version ", get(4, 1),
                                     ", this build reads version 1: build both sides from the same rdmakit release"));
  const auto rights = static_cast<access>(get(5, 1) | (get(6, 1) << 8));
  const std::uint64_t addr = get(8, 8), length = get(20, 8);
  if ((rights & ~remote_access_bits) != access::none)
    throw exchange_error(exchange_errc::malformed,
                         detail::cat("cm_region_from(): the peer's region descriptor grants ",
                                     detail::hex(to_underlying(rights)),
                                     ": its access holds bits other than remote write/read/atomic"));
  if (length != 0 && length - 1 > ~addr)
    throw exchange_error(exchange_errc::malformed,
                         detail::cat("cm_region_from(): the peer's region at addr ", detail::hex(addr), " of len ",
                                     length, " runs past the end of the address space"));
  return region_descriptor(addr, static_cast<std::uint32_t>(get(16, 4)), length, rights);
}

template <cm_backend B>
class cm_listener;
template <cm_backend B>
class cm_request;
template <cm_backend B, transport T, signaling S>
class cm_connection;

namespace detail {

// An event channel; ids keep it alive (librdmacm: the channel must outlive its ids).
template <class B>
struct cm_channel_block {
  device_ref<B> dev;
  typename B::cm_channel ch{};
  explicit cm_channel_block(device_ref<B> d) : dev(std::move(d)), ch(B::cm_create_channel(dev->ctx)) {}
  cm_channel_block(const cm_channel_block&) = delete;
  cm_channel_block& operator=(const cm_channel_block&) = delete;
  ~cm_channel_block() {
    if (ch != typename B::cm_channel{}) B::cm_destroy_channel(ch);
  }
};

// A CM id: owned by its listener, request or connection, and by the queue pair made
// on it (qp_parts::cm), which destroys the QP through it so the CM forgets the QP.
template <class B>
struct cm_id_block final : cm_qp_owner<B> {
  std::shared_ptr<cm_channel_block<B>> chan;
  typename B::cm_id id{};
  bool established = false;
  bool disconnected = false;  // DISCONNECTED seen
  bool disconnect_sent = false;
  bool removed = false;  // DEVICE_REMOVAL seen: every later wait reports it

  // A QP the application made (cm_user_qp_backend), not the CM's: the CM neither
  // destroys it nor moves it to ERR on a disconnect, so this does. Null once destroyed.
  typename B::qp user_qp{};

  cm_id_block(std::shared_ptr<cm_channel_block<B>> c, typename B::cm_id i) : chan(std::move(c)), id(i) {}
  cm_id_block(const cm_id_block&) = delete;
  cm_id_block& operator=(const cm_id_block&) = delete;
  ~cm_id_block() override {
    if (id != typename B::cm_id{}) B::cm_destroy_id(id);
  }
  // The queue pair may be moved out of its connection and destroyed on another thread
  // (any queue pair may be used on its own thread) while the connection disconnects: the
  // two meet on the QP (destroyed, or moved to ERR by this id or by the CM's disconnect),
  // so each holds this lock while it touches the QP. Short and rare: a spin lock.
  void destroy_qp(typename B::qp q) noexcept override {
    const spin_lock::hold held(qp_lock_);
    if (q != typename B::qp{} && q == user_qp) {
      user_qp = {};
      B::destroy_qp(q);
    } else {
      B::cm_destroy_qp(id);
    }
  }
  void disconnect() noexcept {
    if (established && !disconnect_sent && !disconnected) {
      const spin_lock::hold held(qp_lock_);
      user_qp_to_err();
      B::cm_disconnect(id);
    }
    disconnect_sent = true;
  }
  // DISCONNECTED came: answer the peer's request (the IB CM's DREP; without it the
  // peer only sees its own DISCONNECTED after the CM's timeout), which also moves
  // this side's QP to ERR.
  void on_disconnected() noexcept {
    disconnected = true;
    if (!disconnect_sent) {
      const spin_lock::hold held(qp_lock_);
      user_qp_to_err();
      B::cm_disconnect(id);
    }
    disconnect_sent = true;
  }
  // DEVICE_REMOVAL came: the kernel removes the device once every object on it is gone,
  // and until then it sends nothing (rxe: posts were taken and never completed). A
  // disconnect moves the QP to ERR (librdmacm's own QP too), so its outstanding WRs flush.
  void on_removed() noexcept {
    removed = true;
    disconnect();
  }

 private:
  spin_lock qp_lock_;

  // rping -q does the same before rdma_disconnect: its outstanding WRs flush. Under qp_lock_.
  void user_qp_to_err() noexcept {
    if (user_qp == typename B::qp{}) return;
    try {
      qp_attr a;
      a.state = qp_state::err;
      B::modify_qp(user_qp, a, qp_attr_mask::state);
    } catch (...) {  // already in ERR, or the device went away: nothing to flush
    }
  }
};

// What a wait on an id whose device went away throws, then at every later wait: `then`
// says what to do.
[[noreturn]] inline void throw_device_removed(const char* call, const char* then) {
  throw cm_error(cm_errc::connect,
                 cat(call, ": RDMA_CM_EVENT_DEVICE_REMOVAL: the RDMA device went away; ", then,
                     " (the kernel removes the device once every object on it is destroyed)"),
                 cm_event_type::device_removal);
}
inline constexpr const char* removed_connection =
    "the queue pair is in ERR and its outstanding WRs flush: destroy the connection, its queue pair and everything "
    "else on the device, then connect through another device";
inline constexpr const char* removed_listener =
    "the listener takes no more requests: destroy it and everything else on the device, then listen on another "
    "device's address";

// Owns a CM id until a cm_id_block takes it (release): an exception in between (no
// memory for the block, no event channel for it) destroys the id instead of leaking it;
// a connect request's id is rejected first, so its peer is answered at once.
template <class B>
class cm_id_guard {
 public:
  cm_id_guard(typename B::cm_id id, bool request) noexcept : id_(id), request_(request) {}
  cm_id_guard(const cm_id_guard&) = delete;
  cm_id_guard& operator=(const cm_id_guard&) = delete;
  ~cm_id_guard() {
    if (id_ == typename B::cm_id{}) return;
    if (request_) B::cm_reject(id_, nullptr, 0);
    B::cm_destroy_id(id_);
  }
  void release() noexcept { id_ = {}; }

 private:
  typename B::cm_id id_;
  bool request_;
};

// A new id on `chan`, owned by the block returned.
template <class B>
shared_owner<cm_id_block<B>> cm_new_id(std::shared_ptr<cm_channel_block<B>> chan) {
  const typename B::cm_id id = B::cm_create_id(chan->ch);
  cm_id_guard<B> guard(id, false);
  auto blk = make_shared_owner<cm_id_block<B>>(std::move(chan), id);
  guard.release();
  return blk;
}

// The options checked before anything is done: the timeout, the retry counts the CM's
// messages carry in 3 bits (librdmacm's kernel side clamps a larger one to 7, forever on
// some devices, without a word), and (`accept_reads`: an accept on a transport with READ
// or atomics) depths of 0. The passive side's READ depth is its own initiator_depth, the
// active side's the passive side's responder_resources (the CM crosses them): at 0, rxe
// takes a READ or an atomic posted on that queue pair and never starts it, and the queue
// pair stalls behind it without an error. (An active side's own depths cannot do that:
// its initiator_depth 0 only keeps the server from serving its READs, an error.)
inline void check_cm_options(const cm_options& o, bool accept_reads) {
  if (o.timeout.count() <= 0)
    throw usage_error(cat("cm_options::timeout must be positive (got ", o.timeout.count(),
                          " ms): give the longest wait for each connection step in milliseconds"));
  if (o.retry_count > 7)
    throw usage_error(cat("cm_options::retry_count = ", o.retry_count,
                          " is out of range (0..7): the CM carries it in 3 bits"));
  if (o.rnr_retry_count > 7)
    throw usage_error(cat("cm_options::rnr_retry_count = ", o.rnr_retry_count,
                          " is out of range (0..7): the CM carries it in 3 bits; 7 means retry forever"));
  if (accept_reads && o.initiator_depth == 0)
    throw usage_error("cm_request::accept: cm_options::initiator_depth = 0 leaves this side no READ or atomic in "
                      "flight: one posted would never run on rxe, and the queue pair would stall behind it; give 1 "
                      "or more");
  if (accept_reads && o.responder_resources == 0)
    throw usage_error("cm_request::accept: cm_options::responder_resources = 0 becomes the client's READ depth (the "
                      "CM crosses them): a READ or atomic it posted would never run on rxe, and its queue pair would "
                      "stall behind it; give 1 or more");
}

// The READ depths against the device's (once the PD names it): above them the device
// refuses the queue pair's RTR or RTS inside the accept or connect, after the request is
// used up, as a verbs_error that names no option (audit 35, F2).
template <class B>
void cm_check_depths(const cm_options& o, const device_state<B>& dev, const char* call) {
  auto check = [&](std::uint8_t v, std::uint32_t most, const char* option, const char* attr) {
    if (most != 0 && v > most)
      throw usage_error(cat(call, ": cm_options::", option, " = ", unsigned{v}, " is above ", dev.name, "'s ", attr,
                            " (", most, "): give at most that"));
  };
  check(o.responder_resources, dev.attr.max_qp_rd_atom, "responder_resources", "max_qp_rd_atom");
  check(o.initiator_depth, dev.attr.max_qp_init_rd_atom, "initiator_depth", "max_qp_init_rd_atom");
}

template <class B>
using cm_event_of = basic_cm_event<typename B::cm_id>;

// The next event of `ch` within `timeout`; none on timeout, cm_error on a channel error.
template <class B>
cm_event_of<B> cm_wait(typename B::cm_channel ch, std::chrono::milliseconds timeout, const std::string& step) {
  cm_event_of<B> ev;
  const int e = B::cm_get_event(ch, timeout, ev);
  if (e == ETIMEDOUT || e == EAGAIN) return cm_event_of<B>{};
  if (e != 0)
    throw cm_error(cm_errc::system,
                   cat(step, ": reading the CM event channel failed: ", std::generic_category().message(e)));
  return ev;
}

inline std::vector<std::byte> cm_data_of(const std::byte* d, std::size_t n) { return {d, d + n}; }
// True when private data carries nothing: none, or the zeros a transport pads it with.
inline bool cm_data_is_zero(const std::byte* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (d[i] != std::byte{0}) return false;
  return true;
}

// The timeout of a wait the caller bounds (next_request, wait_disconnected): saturated
// and rounded up to milliseconds (ms_timeout); a negative one is refused, as
// cm_options::timeout's is (it was taken as 0, and its message said "within -9223... ms").
template <class Rep, class Period>
std::chrono::milliseconds cm_wait_timeout(std::chrono::duration<Rep, Period> period, const char* call) {
  if constexpr (std::chrono::treat_as_floating_point_v<Rep>)
    if (period.count() != period.count())  // (saturating_cast takes it for 0: a single look)
      throw usage_error(cat(call, ": a NaN timeout: give 0 (look once) or more"));
  const std::chrono::milliseconds t = ms_timeout(period);
  if (t.count() < 0)
    throw usage_error(cat(call, ": a negative timeout (", t.count(), " ms): give 0 (look once) or more"));
  return t;
}

// The wait left until `deadline`: rounded up (0.4 ms is a wait of 1, not none) and 0
// once it passed. The waits below look at the channel once more then, so a timeout of 0
// takes an event already queued.
inline std::chrono::milliseconds cm_time_left(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds{0});
}

// Waits for `want` on the id's channel; any failure event is a cm_error naming `step`.
template <class B>
cm_event_of<B> cm_expect(cm_id_block<B>& blk, cm_event_type want, std::chrono::milliseconds timeout,
                         const std::string& step) {
  const auto deadline = detail::deadline_after(timeout);
  for (;;) {
    auto ev = cm_wait<B>(blk.chan->ch, cm_time_left(deadline), step);
    const auto data = [&] { return cm_data_of(ev.data.data(), ev.data_len); };
    const std::string got = cat(to_string(ev.type), " (status ", ev.status, ")");
    switch (ev.type) {
      case cm_event_type::none:
        if (std::chrono::steady_clock::now() < deadline) continue;
        throw cm_error(cm_errc::timeout, cat(step, ": no ", to_string(want), " within ", timeout.count(),
                                             " ms: is the peer running and answering? (raise cm_options::timeout)"));
      case cm_event_type::addr_error:
        throw cm_error(cm_errc::address,
                       cat(step, ": ", got,
                           ": no RDMA device is reachable at that IP address (is the address "
                           "on an interface an RDMA device sits on?)"),
                       ev.type, ev.status);
      case cm_event_type::route_error:
        throw cm_error(cm_errc::route, cat(step, ": ", got, ": no route to the peer"), ev.type, ev.status);
      case cm_event_type::rejected:
        throw cm_error(cm_errc::rejected,
                       cat(step, ": ", got,
                           ev.status == 8   ? ": nobody listens on that address and port (start the server first)"
                           : ev.status == 4 ? ": the peer's connection manager gave up (it stopped waiting, or "
                                              "its id was destroyed: raise its timeout, or check that it runs)"
                           : cm_data_is_zero(ev.data.data(), ev.data_len)
                               ? ": the peer rejected the connection without a reason (no private data: its "
                                 "application rejected or dropped the request, or its accept failed)"
                               : ": the peer rejected the connection (its private data says why)"),
                       ev.type, ev.status, data());
      case cm_event_type::unreachable:
        throw cm_error(cm_errc::unreachable, cat(step, ": ", got, ": the peer's connection manager did not answer"),
                       ev.type, ev.status);
      case cm_event_type::connect_error:
        throw cm_error(cm_errc::connect, cat(step, ": ", got), ev.type, ev.status);
      case cm_event_type::disconnected:
        blk.on_disconnected();
        if (want != cm_event_type::disconnected)
          throw cm_error(cm_errc::disconnected, cat(step, ": ", got, ": the peer disconnected during setup"), ev.type,
                         ev.status);
        return ev;
      case cm_event_type::device_removal:
        throw cm_error(cm_errc::connect, cat(step, ": ", got, ": the RDMA device went away"), ev.type, ev.status);
      default:
        if (ev.type == want) return ev;
        continue;  // TIMEWAIT_EXIT and the like say nothing about this step
    }
  }
}

// The GID table index of the CM's source GID on its port, or -1.
template <class B>
int cm_find_gid(typename B::context ctx, const cm_route& r) {
  const port_attr pa = B::query_port(ctx, r.port);
  for (std::uint32_t i = 0; i < pa.gid_tbl_len; ++i) {
    const gid_entry e = B::query_gid(ctx, r.port, static_cast<int>(i));
    if (e.valid && e.value == r.sgid) return static_cast<int>(i);
  }
  return -1;
}
// The GID table index of the CM's source GID on its port (the automatic choice if absent).
template <class B>
int cm_gid_index(typename B::context ctx, const cm_route& r) {
  const int i = cm_find_gid<B>(ctx, r);
  return i >= 0 ? i : choose_gid<B>(ctx, r.port);
}
// Refuses a queue pair the application made on another device than the one the CM's
// route leaves from: it would be driven with that device's attributes, then refused by
// rdma_connect/rdma_accept, after the id (and a request) was used up.
template <class B>
void cm_check_route_device(const device_state<B>& dev, const cm_route& r, const char* call) {
  if (r.port >= 1 && r.port <= dev.attr.phys_port_cnt && cm_find_gid<B>(dev.ctx, r) >= 0) return;
  throw usage_error(cat(call, ": the queue pair is on ", dev.name, ", but the connection manager routes through ",
                        "port ", r.port, " of the device with GID ", r.sgid.to_string(),
                        ": make the queue pair on that device (the one whose address the peer connects to, or "
                        "that cm_options::source names)"));
}

// The transports the CM connects, for its own queue pair and one the application made.
template <class T>
constexpr void cm_check_transport() {
  static_assert(std::is_same_v<T, rc> || shares_receives<T>,
                "the connection manager connects RC queue pairs only (rdma_cm's TCP port space; a device "
                "refuses a UC queue pair: connect UC with connect(peer); UD: use address handles)");
  static_assert(!shares_receives<T>, "connection_manager: queue pairs on a shared receive queue are not supported yet");
}

// The usage_errors creating the QP would throw (empty handles, a send queue shallower
// than the signaling policy needs, CQs too small for `caps`), checked before the
// address is resolved or the request taken: a misuse then changes nothing.
template <class B, class T, class S, polling PS, polling PR>
void cm_check_qp_args(const protection_domain<B>& pd, completion_queue<B, PS>& send_cq,
                      completion_queue<B, PR>& recv_cq, const qp_cap& caps, const char* call) {
  cm_check_transport<T>();
  const auto pref = policy_access::pd_ref(pd, call);
  const auto* scq = policy_access::block(send_cq);
  const auto* rcq = policy_access::block(recv_cq);
  if (!scq) throw_empty("completion_queue", call);
  if (!rcq) throw_empty("completion_queue", call);
  check_sq_depth<S>(caps);
  check_cq_room(*scq, *rcq, caps, T::name, pref->dev->attr.max_cqe);
}

// Creates the QP on the id (INIT) with the library's capacity checks and CQ accounting.
// Its callers (accept, cm_connect) ran cm_check_qp_args on the same arguments first.
template <class B, class T, class S, polling PS, polling PR>
qp_parts<B> cm_make_parts(const shared_owner<cm_id_block<B>>& blk, const protection_domain<B>& pd,
                          completion_queue<B, PS>& send_cq, completion_queue<B, PR>& recv_cq, const qp_cap& caps,
                          const cm_options& o, const char* call) {
  auto pref = policy_access::pd_ref(pd, call);
  auto scq = policy_access::shared_block(send_cq);
  auto rcq = policy_access::shared_block(recv_cq);
  const cm_route r = B::cm_query_route(blk->id);
  qp_options qo;
  qo.port = r.port;
  qo.gid_index = cm_gid_index<B>(pref->dev->ctx, r);
  qo.auto_inline = o.auto_inline;
  auto make = [&](qp_parts<B>& p, typename B::pd native_pd, typename B::cq s, typename B::cq rc) {
    // (An EINVAL says why in the backend's words: the PD on another device than the CM
    // chose, or a connection no longer being set up, such as a request whose client gave up.)
    p.qp = B::cm_create_qp(blk->id, native_pd, s, rc, T::type, p.caps);
    p.cm = blk;
  };
  return create_parts<B, T, S>(std::move(pref), std::move(scq), std::move(rcq), caps, qo, {}, make);
}

// The default of the `prepare` hooks: nothing to do before the peer may send.
struct cm_no_prepare {
  template <class QP>
  void operator()(QP&) const noexcept {}
};

// Creates the QP on the id and lets `prepare` post receives on it (INIT). A throw leaves
// the id as it was, without a queue pair: a request can still be answered.
template <class B, class T, class S, polling PS, polling PR, class Prepare>
queue_pair<B, T, S, qp_state::init> cm_prepared_qp(const shared_owner<cm_id_block<B>>& blk,
                                                   const protection_domain<B>& pd, completion_queue<B, PS>& send_cq,
                                                   completion_queue<B, PR>& recv_cq, const qp_cap& caps,
                                                   const cm_options& o, const char* call, Prepare& prepare) {
  auto init = policy_access::adopt<queue_pair<B, T, S, qp_state::init>>(
      cm_make_parts<B, T, S>(blk, pd, send_cq, recv_cq, caps, o, call));
  const auto made = init.native();
  prepare(init);
  // The hook gets the queue pair to post on, not to keep: taken, the connection would
  // come up without it (and the handle taken would be an INIT one on a connected QP).
  if (!init)
    throw usage_error(cat(call, ": the prepare hook moved the queue pair out: post its receives there, and take the "
                                "queue pair from the connection (qp()) once it is established"));
  // Nor to replace: the CM's queue pair went with the old handle, and the accept or
  // connect would have gone out with none (the device's EINVAL, naming librdmacm).
  if (init.native() != made)
    throw usage_error(cat(call, ": the prepare hook replaced the queue pair (assigned another to it, or reset it): "
                                "post its receives on the one it is given, and take the queue pair from the "
                                "connection (qp()) once it is established"));
  return init;
}

// Runs `handshake` (connect or accept, then ESTABLISHED) and returns the RTS queue pair.
template <class B, class T, class S, class Handshake>
queue_pair<B, T, S, qp_state::rts> cm_bring_up(cm_id_block<B>& blk, queue_pair<B, T, S, qp_state::init>&& init,
                                               Handshake&& handshake) {
  handshake();
  blk.established = true;
  return policy_access::adopt<queue_pair<B, T, S, qp_state::rts>>(std::move(policy_access::parts(init)));
}

// Address and route resolution of an active id, from cm_options::source if given.
template <class B>
void cm_resolve(cm_id_block<B>& blk, const cm_address& to, const cm_options& o, const std::string& where) {
  try {
    B::cm_resolve_addr(blk.id, o.source, to, o.timeout);
  } catch (const verbs_error& e) {
    const int err = e.errno_value();
    if (!o.source.is_any() && (err == EADDRNOTAVAIL || err == ENODEV))
      throw cm_error(cm_errc::address,
                     cat(where, ": the source address ", o.source.to_string(),
                         " (cm_options::source) is not the address of any RDMA device here: ", e.what()),
                     cm_event_type::addr_error, -err);
    if (err == EADDRNOTAVAIL || err == ENODEV || err == ENETUNREACH || err == EHOSTUNREACH || err == EAFNOSUPPORT)
      throw cm_error(cm_errc::address,
                     cat(where, ": no RDMA device serves that address (",
                         to.is_ipv6 ? "IPv6: is an RDMA device's interface on that subnet?" : "no route to it", "): ",
                         e.what()),
                     cm_event_type::addr_error, -err);
    throw;
  }
  cm_expect<B>(blk, cm_event_type::addr_resolved, o.timeout, cat(where, " (address resolution)"));
  try {
    B::cm_resolve_route(blk.id, o.timeout);
  } catch (const verbs_error& e) {
    if (e.errno_value() != ENODEV && e.errno_value() != ENETUNREACH) throw;
    throw cm_error(cm_errc::route,
                   cat(where, " (route resolution): no RDMA device on the route (a loopback address "
                              "such as 127.0.0.1 or ::1 has none: use the address of the RDMA device's "
                              "interface): ", e.what()),
                   cm_event_type::route_error, -e.errno_value());
  }
  cm_expect<B>(blk, cm_event_type::route_resolved, o.timeout, cat(where, " (route resolution)"));
}

// What a queue pair the application made must be for the CM to take it over (checked
// before anything is done: a refused one stays the caller's).
template <class B, class T, class S>
void cm_check_user_qp(const queue_pair<B, T, S, qp_state::init>& qp, const char* call) {
  cm_check_transport<T>();
  const auto& given = policy_access::parts(qp);
  if (given.qp == typename B::qp{}) throw_empty("queue_pair", call);
  if (given.cm)
    throw usage_error(cat(call, ": the queue pair already belongs to a connection manager id: pass a queue "
                                "pair made with pd.create_qp (or its reset())"));
}

// Takes over a queue pair the application made (cm_user_qp_backend, cm_check_user_qp
// passed) for the id `blk`: the QP keeps the id alive, and the id moves the QP to ERR on
// a disconnect.
template <class B, class T, class S>
queue_pair<B, T, S, qp_state::init> cm_adopt_user_qp(queue_pair<B, T, S, qp_state::init>&& qp,
                                                     const shared_owner<cm_id_block<B>>& blk) {
  auto mine = policy_access::adopt<queue_pair<B, T, S, qp_state::init>>(std::move(policy_access::parts(qp)));
  auto& p = policy_access::parts(mine);
  blk->user_qp = p.qp;
  p.cm = blk;
  return mine;
}

// Moves a queue pair the application made INIT→INIT→RTR→RTS with the attributes the
// CM computes for the id's connection (rdma_init_qp_attr), as rping -q does. `accepting`:
// the passive side's answer, not sent yet, whose READ depths the queue pair takes (the
// CM's attributes still carry the request's, crossed: audit 35), as the kernel sets a
// queue pair the CM made from the accept's parameters.
template <class B, class T, class S>
void cm_user_to_rts(cm_id_block<B>& blk, queue_pair<B, T, S, qp_state::init>& qp,
                    const cm_conn_param* accepting = nullptr) {
  auto& p = policy_access::parts(qp);
  qp_state from = qp_state::init;
  for (const qp_state st : {qp_state::init, qp_state::rtr, qp_state::rts}) {
    qp_attr a;
    qp_attr_mask m = qp_attr_mask::none;
    B::cm_init_qp_attr(blk.id, st, a, m);
    if (accepting && st == qp_state::rtr && has_all(m, qp_attr_mask::max_dest_rd_atomic))
      a.max_dest_rd_atomic = accepting->responder_resources;
    if (accepting && st == qp_state::rts && has_all(m, qp_attr_mask::max_qp_rd_atomic))
      a.max_rd_atomic = accepting->initiator_depth;
    modify_step<B, T>(p, a, m, from,
                      st == qp_state::init ? "INIT→INIT (the CM's port and rights)"
                      : st == qp_state::rtr ? "INIT→RTR (the CM's path)"
                                            : "RTR→RTS (the CM's PSN and retries)");
    if (st == qp_state::init && has_all(m, qp_attr_mask::port)) p.opts.port = a.port_num;
    if (st == qp_state::rtr && a.av.is_global) p.gid_index = a.av.grh.sgid_index;
    if (st == qp_state::rts) p.psn = a.sq_psn;
    from = st;
  }
}

// The parameters of a connect (`request`: at most cm_connect_data_max bytes of private
// data) or an accept (cm_private_data_max), checked before anything is done.
inline cm_conn_param cm_param(const cm_options& o, std::span<const std::byte> data, const char* call, bool request) {
  const std::size_t max = request ? cm_connect_data_max : cm_private_data_max;
  if (data.size() > max)
    throw usage_error(cat(call, ": ", data.size(), " bytes of private data, but ",
                          request ? "a connect request carries at most " : "an accept carries at most ", max,
                          request ? " (cm_connect_data_max; an accept's answer may carry 196): send less"
                                  : " (cm_private_data_max): send less"));
  cm_conn_param p;
  p.private_data = data.empty() ? nullptr : data.data();
  p.private_data_len = static_cast<std::uint8_t>(data.size());
  p.responder_resources = o.responder_resources;
  p.initiator_depth = o.initiator_depth;
  p.retry_count = o.retry_count;
  p.rnr_retry_count = o.rnr_retry_count;
  return p;
}

}  // namespace detail

/// A connected queue pair set up by the CM, with the private data the peer sent and
/// the CM id that disconnects it. Move-only; destroying it disconnects.
template <cm_backend B, transport T, signaling S = signal_all>
class cm_connection {
 public:
  /// The queue pair's type: RTS, ready for sends.
  using queue_pair_type = queue_pair<B, T, S, qp_state::rts>;

  /// An empty connection.
  cm_connection() = default;
  /// Takes over `other`'s connection; `other` becomes empty.
  cm_connection(cm_connection&&) noexcept = default;
  /// Disconnects the connection held, then takes over `other`'s.
  cm_connection& operator=(cm_connection&& o) noexcept {
    if (this != &o) {
      if (id_) id_->disconnect();
      id_ = std::move(o.id_);
      qp_ = std::move(o.qp_);
      peer_ = std::move(o.peer_);
    }
    return *this;
  }
  ~cm_connection() {
    if (id_) id_->disconnect();
  }

  /// False when empty (default or moved from).
  explicit operator bool() const noexcept { return id_ != nullptr; }
  /// The RTS queue pair (may be moved out: it keeps the CM id alive).
  queue_pair_type& qp() noexcept { return qp_; }
  /// The private data the peer sent with its request or answer (real devices pad it
  /// to the message's size with zeros).
  std::span<const std::byte> peer_data() const noexcept { return peer_; }
  /// The region the peer sent with cm_region_data, if it sent one.
  std::optional<region_descriptor> peer_region() const { return cm_region_from(peer_); }
  /// Disconnects (rdma_disconnect): the queue pair goes to ERR, its outstanding WRs
  /// flush, both sides get DISCONNECTED. Idempotent.
  void disconnect() { id("disconnect").disconnect(); }
  /// Waits up to `timeout` for DISCONNECTED (the peer's disconnect, or the answer to
  /// this side's): true once it came (and then reads any later event the CM queued,
  /// without waiting). A peer's disconnect is answered at once (this side's QP goes to
  /// ERR too), as librdmacm applications do. Once the device went away
  /// (DEVICE_REMOVAL), this and every later call throw cm_error(connect), and the QP
  /// is moved to ERR so its outstanding WRs flush.
  /// Any duration type: one past the range of milliseconds (hours::max()) is no limit.
  template <class Rep, class Period>
  bool wait_disconnected(std::chrono::duration<Rep, Period> period) {
    // Saturated, not converted implicitly (hours::max() overflowed to a negative timeout),
    // and rounded up: 500us cut to 0 ms was a single look.
    constexpr const char* call = "cm_connection::wait_disconnected";
    const std::chrono::milliseconds timeout = detail::cm_wait_timeout(period, call);
    auto& b = id("wait_disconnected");
    if (!b.disconnected && !b.removed) {
      const auto deadline = detail::deadline_after(timeout);
      for (;;) {  // at least one look, so a timeout of 0 polls
        auto ev = detail::cm_wait<B>(b.chan->ch, detail::cm_time_left(deadline), call);
        if (ev.type == cm_event_type::disconnected) {
          b.on_disconnected();
          break;
        }
        if (ev.type == cm_event_type::device_removal) {
          b.on_removed();
          break;
        }
        if (ev.type == cm_event_type::none && std::chrono::steady_clock::now() >= deadline) return false;
      }
    }
    // What the CM queues after DISCONNECTED (TIMEWAIT_EXIT), or after the disconnect a
    // removal makes, is read too, so that the event_fd of a connection that is over is
    // not left readable.
    for (;;) {
      const auto type = detail::cm_wait<B>(b.chan->ch, std::chrono::milliseconds(0), call).type;
      if (type == cm_event_type::none) break;
      if (type == cm_event_type::device_removal) b.on_removed();
    }
    if (b.removed) detail::throw_device_removed(call, detail::removed_connection);
    return true;
  }
  /// A descriptor readable while a CM event for this connection is queued (for epoll).
  /// Once disconnected, the CM may queue more (TIMEWAIT_EXIT, seconds later on a
  /// device): wait_disconnected(0ms) reads them.
  int event_fd() const { return B::cm_channel_fd(id("event_fd").chan->ch); }
  /// Where the CM routed the connection: the local port, this side's GID and the
  /// peer's (on RoCE the IPv4-mapped GIDs of the two addresses: with
  /// cm_options::source, sgid is the source's).
  cm_route route() const { return B::cm_query_route(id("route").id); }

 private:
  friend class cm_request<B>;
  template <transport T2, signaling S2, cm_backend B2, polling PS, polling PR, class Prepare>
  friend cm_connection<B2, T2, S2> cm_connect(const protection_domain<B2>&, completion_queue<B2, PS>&,
                                              completion_queue<B2, PR>&, const qp_cap&, const cm_address&,
                                              std::span<const std::byte>, const cm_options&, Prepare);
  template <cm_backend B2, transport T2, signaling S2>
    requires cm_user_qp_backend<B2>
  friend cm_connection<B2, T2, S2> cm_connect(queue_pair<B2, T2, S2, qp_state::init>&&, const cm_address&,
                                              std::span<const std::byte>, const cm_options&);

  cm_connection(detail::shared_owner<detail::cm_id_block<B>> id, queue_pair_type qp, std::vector<std::byte> peer) noexcept
      : id_(std::move(id)), qp_(std::move(qp)), peer_(std::move(peer)) {}

  detail::cm_id_block<B>& id(const char* call) const {
    if (!id_) detail::throw_empty("cm_connection", call);
    return *id_;
  }

  detail::shared_owner<detail::cm_id_block<B>> id_;
  queue_pair_type qp_;
  std::vector<std::byte> peer_;
};

/// A peer's connect request, from cm_listener::next_request: read its private data,
/// then accept (which makes the queue pair) or reject. Dropped unanswered, it is rejected.
template <cm_backend B>
class cm_request {
 public:
  /// An empty request.
  cm_request() = default;
  /// Takes over `other`'s request; `other` becomes empty.
  cm_request(cm_request&&) noexcept = default;
  /// Rejects the request held, then takes over `o`'s.
  cm_request& operator=(cm_request&& o) noexcept {
    if (this != &o) {
      drop_();
      id_ = std::move(o.id_);
      data_ = std::move(o.data_);
    }
    return *this;
  }
  ~cm_request() { drop_(); }

  /// False when empty (default, moved from, accepted or rejected).
  explicit operator bool() const noexcept { return id_ != nullptr; }
  /// The private data of the request (real devices pad it to 56 bytes).
  std::span<const std::byte> private_data() const noexcept { return data_; }
  /// The region the peer sent with cm_region_data, if it sent one.
  std::optional<region_descriptor> peer_region() const { return cm_region_from(data_); }

  /// Creates the queue pair on the request's id (on `pd`, which must be on the device
  /// the request came in on), calls `prepare(qp)` with it in INIT (post the receives
  /// the peer's first sends need there: it may send as soon as it is ESTABLISHED),
  /// accepts with `reply` as private data and waits for ESTABLISHED. Throws cm_error
  /// (timeout, the peer gone) or verbs_error (the QP). A failure before the accept goes
  /// out (the device refusing the queue pair, `prepare` throwing, rdma_accept refused)
  /// destroys the queue pair and leaves the request: answer it again (reject, or accept
  /// differently).
  template <transport T, signaling S = signal_all, polling P, class Prepare = detail::cm_no_prepare>
  cm_connection<B, T, S> accept(const protection_domain<B>& pd, completion_queue<B, P>& cq, const qp_cap& caps,
                                std::span<const std::byte> reply = {}, const cm_options& o = {},
                                Prepare prepare = {}) && {
    return std::move(*this).template accept<T, S>(pd, cq, cq, caps, reply, o, prepare);
  }
  /// As above, with separate send and receive CQs.
  template <transport T, signaling S = signal_all, polling PS, polling PR,
            class Prepare = detail::cm_no_prepare>
  cm_connection<B, T, S> accept(const protection_domain<B>& pd, completion_queue<B, PS>& send_cq,
                                completion_queue<B, PR>& recv_cq, const qp_cap& caps,
                                std::span<const std::byte> reply = {}, const cm_options& o = {},
                                Prepare prepare = {}) && {
    detail::check_cm_options(o, initiates_reads<T>);
    const auto param = detail::cm_param(o, reply, "cm_request::accept", false);
    if (!id_) detail::throw_empty("cm_request", "accept");
    detail::cm_check_qp_args<B, T, S>(pd, send_cq, recv_cq, caps, "cm_request::accept");
    detail::cm_check_depths(o, *detail::policy_access::pd_ref(pd, "cm_request::accept")->dev, "cm_request::accept");
    const detail::cm_id_block<B>* const asked = id_.get();
    auto init = detail::cm_prepared_qp<B, T, S>(id_, pd, send_cq, recv_cq, caps, o, "cm_request::accept", prepare);
    if (id_.get() != asked)  // (its queue pair is the first request's, which the hook answered)
      throw usage_error("cm_request::accept: the prepare hook answered or replaced the request being accepted: "
                        "leave the request alone in the hook, and take the next one after this accept");
    B::cm_accept(id_->id, param);  // refused: the queue pair goes, the request stays
    auto blk = take_("accept");  // gone out: from here on an exception destroys the id (the peer sees it)
    auto qp = detail::cm_bring_up<B, T, S>(*blk, std::move(init), [&] {
      detail::cm_expect<B>(*blk, cm_event_type::established, o.timeout, "cm_request::accept");
    });
    return cm_connection<B, T, S>(std::move(blk), std::move(qp), std::move(data_));
  }

  /// Accepts with a queue pair the application made (rping -q; the backend must model
  /// cm_user_qp_backend): `qp` in INIT, on a PD of the device the request came in on,
  /// its first receives posted. The QP moves INIT→RTR→RTS with the CM's attributes
  /// (rdma_init_qp_attr) before the accept goes out, then ESTABLISHED is awaited. The
  /// connection owns the QP from here; on a failure it is destroyed, and the request
  /// stays unless the accept went out.
  template <transport T, signaling S>
    requires cm_user_qp_backend<B>
  cm_connection<B, T, S> accept(queue_pair<B, T, S, qp_state::init>&& qp, std::span<const std::byte> reply = {},
                                const cm_options& o = {}) && {
    detail::check_cm_options(o, initiates_reads<T>);
    auto param = detail::cm_param(o, reply, "cm_request::accept", false);
    if (!id_) detail::throw_empty("cm_request", "accept");
    detail::cm_check_user_qp(qp, "cm_request::accept");
    detail::cm_check_depths(o, *detail::policy_access::parts(qp).pd->dev, "cm_request::accept");
    detail::cm_check_route_device(detail::policy_access::parts(qp).dev(), B::cm_query_route(id_->id),
                                  "cm_request::accept");
    auto mine = detail::cm_adopt_user_qp(std::move(qp), id_);
    // Refused up to the accept itself: the queue pair goes (it is the connection's), the
    // request stays.
    detail::cm_user_to_rts(*id_, mine, &param);
    param.qp_num = mine.qp_num();
    B::cm_accept(id_->id, param);
    auto blk = take_("accept");  // gone out: from here on an exception destroys the id (the peer sees it)
    detail::cm_expect<B>(*blk, cm_event_type::established, o.timeout, "cm_request::accept");
    blk->established = true;
    auto rts = detail::policy_access::adopt<queue_pair<B, T, S, qp_state::rts>>(
        std::move(detail::policy_access::parts(mine)));
    return cm_connection<B, T, S>(std::move(blk), std::move(rts), std::move(data_));
  }

  /// Rejects the request; the peer's cm_connect throws cm_error(rejected) with `reason`
  /// as its private_data().
  void reject(std::span<const std::byte> reason = {}) && {
    // A REJ's limit, not an accept's (cm_private_data_max): a longer reason went out cut.
    if (reason.size() > cm_reject_data_max)
      throw usage_error(detail::cat("cm_request::reject: ", reason.size(),
                                    " bytes of private data, but a reject carries at most ", cm_reject_data_max,
                                    ": send less"));
    auto blk = take_("reject");
    if (int e = B::cm_reject(blk->id, reason.empty() ? nullptr : reason.data(), static_cast<std::uint8_t>(reason.size())))
      throw verbs_error("rdma_reject", e,
                        e == EINVAL ? "rejecting a connect request that is no longer being set up: its client gave up "
                                      "(its connect timed out) or reset it, so there is nothing left to reject"
                                    : "rejecting a connect request");
  }

 private:
  friend class cm_listener<B>;
  cm_request(detail::shared_owner<detail::cm_id_block<B>> id, std::vector<std::byte> d) noexcept
      : id_(std::move(id)), data_(std::move(d)) {}
  detail::shared_owner<detail::cm_id_block<B>> take_(const char* call) {
    if (!id_) detail::throw_empty("cm_request", call);
    return std::move(id_);
  }
  void drop_() noexcept {
    if (id_) B::cm_reject(id_->id, nullptr, 0);
    id_.reset();
  }
  detail::shared_owner<detail::cm_id_block<B>> id_;
  std::vector<std::byte> data_;
};

/// Listens for connect requests on an address (0.0.0.0: every address; port 0: one the
/// system picks). Each request gets its own event channel (rdma_migrate_id), so its
/// connection's events never mix with the listener's.
template <cm_backend B>
class cm_listener {
 public:
  /// An empty listener.
  cm_listener() = default;
  /// Binds and listens on `addr` with the device `dev` (the mock: its fabric; librdmacm
  /// binds to whichever device has the address). Throws verbs_error when the address
  /// cannot be bound (in use, not local). `backlog`: requests that may wait unread for
  /// next_request (0 or less: the system's largest); one past it is dropped, and its
  /// client's CM sends it again later (seconds, on a device), until it times out.
  cm_listener(const device<B>& dev, const cm_address& addr, int backlog = 16) {
    auto dref = dev_ref_(dev);
    auto chan = std::make_shared<detail::cm_channel_block<B>>(std::move(dref));
    auto blk = detail::cm_new_id<B>(chan);
    B::cm_listen(blk->id, addr, backlog);
    addr_ = addr;
    addr_.port = B::cm_bound_port(blk->id);
    id_ = std::move(blk);
  }
  /// Takes over `other`'s listener; `other` becomes empty (its address() too).
  cm_listener(cm_listener&& other) noexcept
      : id_(std::move(other.id_)), addr_(std::exchange(other.addr_, cm_address{})) {}
  /// Stops listening, then takes over `other`'s listener.
  cm_listener& operator=(cm_listener&& other) noexcept {
    id_ = std::move(other.id_);
    addr_ = std::exchange(other.addr_, cm_address{});
    return *this;
  }

  /// False when empty.
  explicit operator bool() const noexcept { return id_ != nullptr; }
  /// The address listened on, with the port actually bound; all zero when empty.
  const cm_address& address() const noexcept { return addr_; }
  /// A descriptor readable while a connect request is queued (for epoll).
  int event_fd() const {
    if (!id_) detail::throw_empty("cm_listener", "event_fd");
    return B::cm_channel_fd(id_->chan->ch);
  }

  /// The next connect request, waiting up to `timeout`; cm_error(timeout) if none came,
  /// cm_error(connect) from the moment the device of the listener's address went away
  /// (DEVICE_REMOVAL; not for a listener on 0.0.0.0, which the kernel keeps).
  /// Any duration type: one past the range of milliseconds (hours::max()) is no limit.
  template <class Rep, class Period>
  cm_request<B> next_request(std::chrono::duration<Rep, Period> period) {
    // Saturated, not converted implicitly (hours::max() overflowed to a negative timeout),
    // and rounded up: 500us cut to 0 ms was a single look.
    constexpr const char* call = "cm_listener::next_request";
    const std::chrono::milliseconds timeout = detail::cm_wait_timeout(period, call);
    if (!id_) detail::throw_empty("cm_listener", "next_request");
    if (id_->removed) removed_(call);
    const auto deadline = detail::deadline_after(timeout);
    for (;;) {  // at least one look, so a timeout of 0 takes a request already queued
      auto ev = detail::cm_wait<B>(id_->chan->ch, detail::cm_time_left(deadline), call);
      if (ev.type == cm_event_type::none && std::chrono::steady_clock::now() >= deadline)
        throw cm_error(cm_errc::timeout, detail::cat("cm_listener::next_request: no connect request on ",
                                                     addr_.to_string(), " within ", timeout.count(), " ms"));
      if (ev.type == cm_event_type::device_removal) {
        id_->on_removed();
        removed_(call);
      }
      if (ev.type != cm_event_type::connect_request) continue;
      // The new id is ours from here: should its channel or block not be made, it is
      // rejected and destroyed, not leaked with its peer left waiting.
      detail::cm_id_guard<B> guard(ev.id, true);
      // The new id moves to a channel of its own, kept alive by it.
      auto chan = std::make_shared<detail::cm_channel_block<B>>(id_->chan->dev);
      auto blk = detail::make_shared_owner<detail::cm_id_block<B>>(chan, ev.id);
      guard.release();  // the block destroys it now (the peer sees a reject)
      B::cm_migrate_id(ev.id, chan->ch);
      return cm_request<B>(std::move(blk), detail::cm_data_of(ev.data.data(), ev.data_len));
    }
  }

 private:
  // Once the device went away: reads what else the channel holds, so its fd is not left
  // readable (requests are rejected, their ids destroyed), and throws.
  [[noreturn]] void removed_(const char* call) {
    for (;;) {
      auto ev = detail::cm_wait<B>(id_->chan->ch, std::chrono::milliseconds(0), call);
      if (ev.type == cm_event_type::none) break;
      if (ev.type == cm_event_type::connect_request) detail::cm_id_guard<B> rejected(ev.id, true);
    }
    detail::throw_device_removed(call, detail::removed_listener);
  }
  static detail::device_ref<B> dev_ref_(const device<B>& dev) {
    if (!dev) detail::throw_empty("device", "cm_listener");
    return detail::policy_access::device_ref(dev);
  }
  detail::shared_owner<detail::cm_id_block<B>> id_;
  cm_address addr_{};
};

/// Connects to a listener at `to`: resolves the address and route, creates the queue
/// pair on the CM id (on `pd`, which must be on the device the CM chooses for `to`),
/// calls `prepare(qp)` with it in INIT (post receives there), sends the request with
/// `data` as private data and waits for ESTABLISHED. Throws cm_error (address, route,
/// rejected, unreachable, timeout) or verbs_error.
template <transport T, signaling S = signal_all, cm_backend B, polling PS, polling PR,
          class Prepare = detail::cm_no_prepare>
cm_connection<B, T, S> cm_connect(const protection_domain<B>& pd, completion_queue<B, PS>& send_cq,
                                  completion_queue<B, PR>& recv_cq, const qp_cap& caps, const cm_address& to,
                                  std::span<const std::byte> data = {}, const cm_options& o = {},
                                  Prepare prepare = {}) {
  detail::check_cm_options(o, false);
  const auto param = detail::cm_param(o, data, "cm_connect", true);
  detail::cm_check_qp_args<B, T, S>(pd, send_cq, recv_cq, caps, "cm_connect");  // before the address is resolved
  auto pref = detail::policy_access::pd_ref(pd, "cm_connect");
  detail::cm_check_depths(o, *pref->dev, "cm_connect");
  auto chan = std::make_shared<detail::cm_channel_block<B>>(pref->dev);
  auto blk = detail::cm_new_id<B>(chan);
  const std::string where = detail::cat("cm_connect to ", to.to_string());
  detail::cm_resolve<B>(*blk, to, o, where);
  detail::cm_event_of<B> ev;
  auto init = detail::cm_prepared_qp<B, T, S>(blk, pd, send_cq, recv_cq, caps, o, "cm_connect", prepare);
  auto qp = detail::cm_bring_up<B, T, S>(*blk, std::move(init), [&] {
    B::cm_connect(blk->id, param);
    ev = detail::cm_expect<B>(*blk, cm_event_type::established, o.timeout, where);
  });
  return cm_connection<B, T, S>(std::move(blk), std::move(qp), detail::cm_data_of(ev.data.data(), ev.data_len));
}


/// cm_connect with a queue pair the application made (rping -q; the backend must model
/// cm_user_qp_backend): `qp` in INIT, on a PD of the device the CM chooses for `to`,
/// its first receives posted. The request carries its number; when the peer's answer
/// comes (CONNECT_RESPONSE) the QP moves INIT→RTR→RTS with the CM's attributes
/// (rdma_init_qp_attr) and the RTU goes out (rdma_establish). The connection owns the
/// QP from here; on a failure it is destroyed. Throws as the other cm_connect.
template <cm_backend B, transport T, signaling S>
  requires cm_user_qp_backend<B>
cm_connection<B, T, S> cm_connect(queue_pair<B, T, S, qp_state::init>&& qp, const cm_address& to,
                                  std::span<const std::byte> data = {}, const cm_options& o = {}) {
  detail::check_cm_options(o, false);
  auto param = detail::cm_param(o, data, "cm_connect", true);
  detail::cm_check_user_qp(qp, "cm_connect");
  detail::cm_check_depths(o, *detail::policy_access::parts(qp).pd->dev, "cm_connect");
  auto chan = std::make_shared<detail::cm_channel_block<B>>(detail::policy_access::parts(qp).pd->dev);
  auto blk = detail::cm_new_id<B>(chan);
  const std::string where = detail::cat("cm_connect to ", to.to_string());
  detail::cm_resolve<B>(*blk, to, o, where);  // before the queue pair is taken: a failure leaves it the caller's
  detail::cm_check_route_device(detail::policy_access::parts(qp).dev(), B::cm_query_route(blk->id), "cm_connect");
  auto mine = detail::cm_adopt_user_qp(std::move(qp), blk);
  param.qp_num = mine.qp_num();
  B::cm_connect(blk->id, param);
  const auto ev = detail::cm_expect<B>(*blk, cm_event_type::connect_response, o.timeout, where);
  detail::cm_user_to_rts(*blk, mine);
  B::cm_establish(blk->id);
  blk->established = true;
  auto rts =
      detail::policy_access::adopt<queue_pair<B, T, S, qp_state::rts>>(std::move(detail::policy_access::parts(mine)));
  return cm_connection<B, T, S>(std::move(blk), std::move(rts), detail::cm_data_of(ev.data.data(), ev.data_len));
}

/// cm_connect with one CQ for sends and receives.
template <transport T, signaling S = signal_all, cm_backend B, polling P, class Prepare = detail::cm_no_prepare>
cm_connection<B, T, S> cm_connect(const protection_domain<B>& pd, completion_queue<B, P>& cq, const qp_cap& caps,
                                  const cm_address& to, std::span<const std::byte> data = {},
                                  const cm_options& o = {}, Prepare prepare = {}) {
  return cm_connect<T, S>(pd, cq, cq, caps, to, data, o, prepare);
}

RDMAKIT_END_NAMESPACE

template <>
struct std::is_error_code_enum<rdmakit::cm_errc> : std::true_type {};
