#pragma once
// Internal state of the mock HCA: the fabric, its devices, and the verbs objects.
// Everything here is guarded by fabric_state::mu.
#include <rdmakit/backends/mock/backend.hpp>
#include <rdmakit/backends/mock/condvar.hpp>
#include <rdmakit/backends/mock/fabric.hpp>
#include <rdmakit/backends/mock/object_map.hpp>
#include <rdmakit/backends/mock/object_set.hpp>
#include <rdmakit/backends/mock/random.hpp>
#include <rdmakit/backends/mock/ready_fd.hpp>
#include <rdmakit/backends/mock/ring.hpp>
#include <rdmakit/backends/mock/sge_list.hpp>
#include <rdmakit/detail/chrono.hpp>
#include <rdmakit/detail/function.hpp>
#include <rdmakit/detail/text.hpp>
#include <rdmakit/detail/thread.hpp>

#include <cstdint>
#include <mutex>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

// Messages are built with the core joiner: `cat("port ", port)` (an unqualified detail:: here is mock::detail).
using ::rdmakit::detail::append;
using ::rdmakit::detail::cat;

using mock_backend = backends::mock;
using clock_ns = std::uint64_t;

struct port_rt {
  port_config cfg;
  std::uint16_t lid = 0;
  std::vector<gid_entry> gids;  // gid_tbl_len entries; empty slots are !valid
  bool up = true;
  bool removed = false;  // its device was removed (fabric::remove_device): it stays down
};

// How many of each object a device has, against cfg.limits (max_pd, max_mr, ...).
struct object_counts {
  std::uint32_t pd = 0, mr = 0, cq = 0, qp = 0, ah = 0, srq = 0;
};

struct device_rt {
  device_config cfg;
  std::uint32_t index = 0;
  std::vector<port_rt> ports;  // ports[0] is port 1
  object_counts count;
};

class context_obj {
 public:
  fabric_state* fab = nullptr;
  rdmakit::detail::shared_owner<fabric_state> keep;  // the fabric object may go first
  std::uint32_t dev = 0;
  // Few and rare (a vector: <deque> and its instantiations cost every translation unit
  // that includes the mock, issue 12). Add with push_async: async_ready must follow it.
  std::vector<async_event> async_q;
  ready_fd async_ready;  // readable while async_q is not empty
  int children = 0;  // pds, cqs, channels

  void push_async(const async_event& ev) {
    async_q.push_back(ev);
    async_ready.sync(true);
  }
};

class pd_obj {
 public:
  context_obj* ctx = nullptr;
  int children = 0;  // mrs, qps, ahs, srqs
};

class mr_obj {
 public:
  pd_obj* pd = nullptr;
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  access flags = access::none;
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
  std::uint32_t windows = 0;  // windows bound to it (attach_window): dereg_mr refuses it
};

class qp_obj;

/// A memory window. Bound: `mr` and `length` > 0; type 2 windows also name the QP that
/// bound them, the only one peers may use them through.
class mw_obj {
 public:
  pd_obj* pd = nullptr;
  mw_type type = mw_type::type2;
  std::uint32_t rkey = 0;  // (index << 8) | key byte; the key byte changes on each bind
  // What mw_rkey() says (ibv_mw::rkey): type 1 binds change it when posted, as rxe's
  // provider does; for type 2 the poster sets it (set_mw_rkey). A BIND_MW names the
  // window by it.
  std::uint32_t user_rkey = 0;
  mr_obj* mr = nullptr;
  qp_obj* qp = nullptr;
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  access rights = access::none;
};

/// The MR a QP last found for a key (lkey or rkey): valid while fabric_state::mr_epoch
/// is `epoch` (no MR deregistered since: a key is given again only after its region's
/// deregistration).
struct key_cache {
  std::uint32_t key = 0;
  mr_obj* mr = nullptr;
  std::uint64_t epoch = 0;
};

class ah_obj {
 public:
  pd_obj* pd = nullptr;
  ah_attr attr;
};

class cq_obj;

class channel_obj {
 public:
  context_obj* ctx = nullptr;
  std::vector<cq_obj*> events;  // CQs whose event is due, oldest first (rarely more than one)
  ready_fd ready;  // readable while events is not empty
  int cqs = 0;
};

/// A CQE plus what the mock needs when it is polled (the strict slot rule).
struct cq_entry {
  mock_backend::wc wc;
  std::uint64_t release_upto = 0;  // send WQE sequence number whose slots this CQE frees (0: none)
};

class cq_obj {
 public:
  context_obj* ctx = nullptr;
  channel_obj* channel = nullptr;
  int capacity = 0;
  slot_ring<cq_entry> entries;
  // Spec profile: a completion found it full (IBA C11-37): it takes no more.
  bool overrun = false;
  // Entries polls took, ever: the room the rxe profile's late flushes had when they
  // became due (completions.hpp, room_when_due).
  std::uint64_t taken = 0;
  bool armed = false;
  bool solicited_only = false;
  std::uint64_t events_delivered = 0;
  std::uint64_t events_acked = 0;
  int qps = 0;  // attached queue pairs (as send or receive CQ)
};

/// A send WQE as the HCA keeps it once posted.
struct send_wqe {
  std::uint64_t seq = 0;  // position in the QP's send history (1-based)
  std::uint64_t wr_id = 0;
  opcode op = opcode::send;
  send_flags flags = send_flags::none;
  bool signaled = false;
  sge_list sges;
  std::vector<std::uint8_t> inline_data;
  bool is_inline = false;
  std::uint32_t length = 0;
  std::uint32_t imm = 0;  // also the rkey a LOCAL_INV or SEND_WITH_INV invalidates
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  // BIND_MW: the window (by index: it may be freed before the WQE runs), its rkey as
  // the poster named it (ibv_mw::rkey: the bind is refused unless it is the window's
  // rkey when the WQE runs, as rxe refuses it), the rkey it gets, and what it is bound
  // to (the region by lkey, remote_addr, mw_length).
  std::uint32_t mw_index = 0;
  std::uint32_t mw_named_rkey = 0;
  std::uint32_t mw_rkey = 0;
  std::uint32_t mw_lkey = 0;
  std::uint64_t mw_length = 0;
  access mw_rights = access::none;
  ah_attr ud_av;
  std::uint32_t ud_port = 1;
  std::uint32_t remote_qpn = 0;
  std::uint32_t remote_qkey = 0;
  bool ud_ah_other_pd = false;  // rxe profile: posted with an AH of another PD (ud.ah_other_pd)

  enum class phase { queued, issued, done } state = phase::queued;
  wc_status status = wc_status::success;
  bool reported = false;  // its completion (or its silent retirement) has happened
  std::uint32_t psn = 0;
  std::uint32_t npkts = 1;
};

struct recv_wqe {
  std::uint64_t wr_id = 0;
  sge_list sges;
};

/// A shared receive queue: every QP created on it takes its receives from `wqes`.
class srq_obj {
 public:
  pd_obj* pd = nullptr;
  srq_attr attr;  // granted max_wr, max_sge; limit: armed watermark (0: disarmed)
  // Receives it holds: max_wr, or under the rxe profile its ring's 2^k - 1 (create
  // reports max_wr as asked, query_srq the ring).
  std::uint32_t capacity = 0;
  slot_ring<recv_wqe> wqes;
  int qps = 0;  // queue pairs created on it
};

/// A message on the wire (one per WQE transmission; packets are counted, not simulated).
struct message {
  std::uint32_t src_qpn = 0;
  std::uint32_t src_dev = 0;
  std::uint8_t src_port = 1;
  gid sgid;
  gid_type sgid_type = gid_type::ib;  // RoCE v2 over IPv4 lays its UD GRH area out as IPv4
  ah_attr av;  // where it goes
  std::uint32_t dest_qpn = 0;
  qp_type type = qp_type::rc;
  opcode op = opcode::send;
  std::uint32_t psn = 0;
  std::uint32_t npkts = 1;
  std::uint64_t wqe_seq = 0;
  std::vector<std::uint8_t> payload;
  // A message delivered within the post that sends it (issue()) may borrow its bytes
  // from the sender's registered buffer instead: then `view` points at `length` bytes.
  const std::uint8_t* view = nullptr;
  // (A message of no bytes may borrow address 0: it has none, whatever `payload` held.)
  const std::uint8_t* bytes() const { return view ? view : payload.data(); }
  std::size_t byte_count() const { return view || !length ? length : payload.size(); }
  std::uint32_t length = 0;
  // Nonzero: only the leading packets came, holding these first bytes of the `length`
  // (the rxe profile's requester failed on a later one): written, never completed.
  std::uint32_t head_bytes = 0;
  std::uint32_t imm = 0;
  bool solicited = false;
  // SEND/WRITE on the wire (spec profile): its bytes are still in the sender's buffer,
  // read when the message reaches the responder (read_sender_bytes), as late as a device
  // may read them; a UC or UD WR completes then.
  bool read_at_delivery = false;
  // A UC or UD message a fault hit, read at its post (sent_at_post): it lands only if its
  // QP has not left RTS/SQD since (qp_obj::times_left was sender_left), as a WR that
  // flushes or vanishes was not sent.
  bool check_sender = false;
  std::uint32_t sender_left = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  std::uint32_t qkey = 0;
  // Found by the sender, valid while fabric_state::qp_epoch is `epoch` (no QP destroyed
  // since): the sending QP, the destination QP, and the (device, port) routed to.
  std::uint64_t epoch = 0;
  qp_obj* src_hint = nullptr;
  std::uint64_t src_serial = 0;  // the sending QP's qp_obj::serial
  qp_obj* dest_hint = nullptr;
  bool routed = false;
  std::uint32_t to_dev = 0;
  std::uint8_t to_port = 0;
};

/// The responder's answer to an RC request.
struct response {
  // bad_sge_reached: not the responder's; it follows the head of a message whose
  // requester stopped at a bad SGE (rxe profile, RC): see send_head_before_bad_sge.
  // seq_nak: a request came ahead of the PSN the responder expected, which it names.
  enum class kind { ack, rnr_nak, nak, bad_sge_reached, seq_nak } what = kind::ack;
  wc_status status = wc_status::success;  // for nak: the requester's status
  std::uint8_t rnr_timer = 0;
  std::vector<std::uint8_t> data;  // READ data or the atomic's original value
};

/// What a responder keeps of the last 256 READs or atomics it executed, by PSN: a
/// duplicate request (a retry) is answered from it, not executed again, and one it holds
/// nothing for was never executed and is dropped (rxe_resp.c duplicate_request).
template <class Record>
class replay_ring {
 public:
  void record(const Record& r) {
    if (entries_.size() < capacity)
      entries_.push_back(r);
    else
      entries_[next_] = r;  // the oldest
    next_ = (next_ + 1) % capacity;
  }
  /// Forgets every record (a QP reset holds no responder resources).
  void clear() noexcept {
    entries_.clear();
    next_ = 0;
  }
  /// The record kept last for `psn`; null when none is kept.
  const Record* find(std::uint32_t psn) const noexcept {
    const std::size_t n = entries_.size();
    for (std::size_t k = 1; k <= n; ++k) {  // newest first (next_ - 1, next_ - 2, ...)
      const Record& e = entries_[(next_ + n - k) % n];
      if (e.psn == psn) return &e;
    }
    return nullptr;
  }

 private:
  static constexpr std::size_t capacity = 256;
  std::vector<Record> entries_;
  std::size_t next_ = 0;  // where the next record goes (the oldest once full)
};
/// An atomic executed: its original value, the answer to its duplicates.
struct atomic_record {
  std::uint32_t psn;
  std::uint64_t original;
};
/// A READ executed: what its duplicates may read again (the same bytes or fewer).
struct read_record {
  std::uint32_t psn;
  std::uint32_t rkey;
  std::uint64_t addr;
  std::uint32_t length;
};

class qp_obj {
 public:
  pd_obj* pd = nullptr;
  cq_obj* send_cq = nullptr;
  cq_obj* recv_cq = nullptr;
  qp_type type = qp_type::rc;
  qp_cap caps;
  bool sq_sig_all = false;
  std::uint32_t qpn = 0;
  // Which QP this is, among every QP the fabric made: a number a reused QP number does
  // not repeat (a message or an answer is for the QP that sent it, not a successor), and
  // the order of timers that fall due together (creation order: runs repeat).
  std::uint64_t serial = 0;
  qp_state state = qp_state::reset;
  // How many times it left RTS or SQD for ERR or RESET: a UC or UD message read at the
  // post (sent_at_post) lands only if its QP has not left since (message::sender_left).
  std::uint32_t times_left = 0;
  qp_attr attr;  // current values of every attribute set so far

  slot_ring<send_wqe> sq;  // every WQE that still holds a slot, oldest first (seq consecutive)
  std::uint64_t next_seq = 1;
  // Lower bounds (sequence numbers) that spare the data path a walk from the SQ's front:
  // every WQE before issue_from is issued or done, every WQE before report_from reported.
  std::uint64_t issue_from = 1;
  std::uint64_t report_from = 1;
  // Every WQE before this one was sent at least once: issue_from, or past it after a
  // retry's rewind (set there and at the move to SQD, off the data path). In SQD those
  // are still sent again by retries and RNR back-offs, as a device drains the messages in
  // progress; later ones wait for RTS.
  std::uint64_t started_until = 1;
  // In SQD, SQ_DRAINED is owed once the WQEs before started_until are all reported:
  // asked with EN_SQD_ASYNC_NOTIFY (rxe 6.1 raises it without).
  bool sq_draining = false;
  slot_ring<recv_wqe> rq;
  srq_obj* srq = nullptr;  // receives come from here instead of rq (rq stays empty)
  // In ERR with its flushes not written yet (fabric_state::first_due's list): a device
  // writes them after modify_qp returns (rxe's tasks, a NIC's hardware), so a poll may
  // find the CQ empty before they come.
  bool flush_due = false;
  qp_obj* next_due = nullptr;
  // Its send and receive CQs' `taken` when its flushes became due (room_when_due).
  std::uint64_t flush_mark_send = 0;
  std::uint64_t flush_mark_recv = 0;

  // Requester.
  std::uint32_t next_psn = 0;
  int retries_left = 0;
  int rnr_left = 0;
  // rxe profile: a transport retry was started since the last ACK (rxe's started_retry):
  // a PSN sequence NAK then starts none (rnr_nak_packets_behind).
  bool retry_started = false;
  clock_ns deadline = 0;  // ack timeout or RNR back-off; 0 = none
  std::size_t timed_slot = 0;  // 1 + its index in fabric_state::timed; 0 = not there
  bool rnr_wait = false;
  // rxe profile, during an RNR wait: the first WQE its requester had not sent when the
  // RNR NAK came; a doorbell sends those from here on (rxe_doorbell_in_rnr_wait).
  std::uint64_t rnr_resume_seq = 0;
  // rxe profile: WQEs a post below RTS wrote into the ring (its doorbell refused them)
  // are not issued by the move to RTS, only by the next doorbell, a post_send once the
  // QP is in RTS (posting.send_below_rts_left_in_ring).
  bool doorbell_owed = false;
  std::vector<message> held;  // messages held back by a reorder fault

  // RC/UC: where attr.av leads (route()) and the destination QP, found once per
  // modify_qp (route) or per qp_epoch (peer) instead of per message.
  bool route_known = false, route_ok = false;
  std::uint32_t route_dev = 0;
  std::uint8_t route_port = 0;
  // RC/UC: messages longer than this are lost on the wire (a PATH_MTU above the active
  // MTU of a port the route crosses: learn_route); no limit otherwise.
  std::uint32_t lost_above = ~std::uint32_t{0};
  qp_obj* peer = nullptr;
  std::uint64_t peer_epoch = 0;
  key_cache lkeys;  // the requester's SGEs
  key_cache rkeys;  // the responder's targets

  // Responder.
  std::uint32_t expected_psn = 0;
  // RC: the answer given to expected_psn's request, which a request ahead of it then
  // meets: none (a PSN sequence NAK is sent, once), seq_nak (sent: dropped), rnr_nak
  // (the request was refused for want of a receive: dropped, spec §8.3/§8.4).
  enum class gap_answer : std::uint8_t { none, seq_nak, rnr_nak } gap = gap_answer::none;
  replay_ring<atomic_record> atomic_replay;  // the last atomics executed
  replay_ring<read_record> read_replay;      // the last READs executed

  std::uint32_t windows = 0;  // type 2 windows bound through it (attach_window)
};

class cm_id_obj;

/// A connection-manager event as queued (cm_get_event copies it out).
struct cm_event_rec {
  cm_event_type type = cm_event_type::none;
  cm_id_obj* id = nullptr;
  cm_id_obj* listen_id = nullptr;
  int status = 0;
  std::vector<std::byte> data;
  std::chrono::steady_clock::time_point due{};  // `later`: when the CM gives up retrying
  // `later`: not an event but a REQ a listener's full backlog dropped, sent again when due.
  bool resend_request = false;
};

/// A connection-manager event channel: readable exactly while `events` is not empty.
/// `later` holds the UNREACHABLEs owed once the CM's retries run out (wall clock), and
/// the REQs to send again: cm_get_event queues (or sends) each when it falls due.
class cm_channel_obj {
 public:
  fabric_state* fab = nullptr;
  rdmakit::detail::shared_owner<fabric_state> keep;
  std::uint32_t dev = 0;  // the device of the context it was made from: ids resolve from it
  std::vector<cm_event_rec> events;  // oldest first
  std::vector<cm_event_rec> later;
  ready_fd ready;
  int ids = 0;
};

/// A connection-manager id: an address (device, port, IPv4) once resolved or bound,
/// the QP created on it, and the peer id once a request connects the two.
class cm_id_obj {
 public:
  // responded: the active side of a QP the application made got CONNECT_RESPONSE and
  // has yet to call cm_establish.
  enum class phase { idle, addr, route, listening, requested, received, responded, established, done };
  cm_channel_obj* ch = nullptr;
  phase state = phase::idle;
  std::uint32_t dev = 0;
  std::uint8_t port = 0;
  int gid_index = 0;
  std::uint32_t local_ip = 0, remote_ip = 0;
  std::uint16_t local_port = 0, remote_port = 0;
  qp_obj* qp = nullptr;
  cm_id_obj* peer = nullptr;      // requested/received/established: the other side
  cm_id_obj* listener = nullptr;  // received: the listening id the request came to
  cm_conn_param param{};          // requested: what the active side asked for
  int backlog = 0;                // listening: CONNECT_REQUESTs its channel may hold unread
  // requested, its REQ dropped for a listener's backlog: the REQ's private data, to send
  // it again, and when the CM stops trying.
  std::vector<std::byte> request_data;
  std::chrono::steady_clock::time_point gives_up{};
  cm_conn_param answer{};         // after an accept: what the passive side answered
  std::uint32_t qpn = 0;          // the QP's number: the CM's (qp) or the application's (qp_num)
  std::uint32_t psn = 0;          // the starting PSN this side's CM chose (sent in the REQ or REP)
  bool passive = false;           // made by a connect request (the listener's side)
};

/// Where a response goes: the requester (with the message's hint), its WQE and PSN.
struct reply_to {
  std::uint32_t qpn = 0;
  std::uint64_t seq = 0;
  std::uint32_t psn = 0;
  qp_obj* hint = nullptr;
  std::uint64_t epoch = 0;
  std::uint64_t serial = 0;  // the requester's qp_obj::serial
};

/// What travels on the wire: a request message to deliver, or a response.
struct wire_event {
  clock_ns when = 0;
  std::uint64_t order = 0;
  bool is_response = false;
  message m;    // a request
  reply_to to;  // a response: `r` to `to`
  response r;
  bool before(const wire_event& o) const { return when != o.when ? when < o.when : order < o.order; }
};

/// A listening connection-manager id: its IPv4 address (0: any) and port.
struct cm_listener {
  std::uint32_t ip = 0;
  std::uint16_t port = 0;
  cm_id_obj* id = nullptr;
};

// The ranges numbers are given from (checks.hpp, cyclic_number): QP numbers have 24
// bits; region keys stay below the windows' keys, 0x40000000 | index << 8 | key byte.
inline constexpr std::uint32_t first_qpn = 0x11, last_qpn = 0xFFFFFF;
inline constexpr std::uint32_t first_mr_key = 0x100, last_mr_key = 0x3FFFFFFF;
inline constexpr std::uint32_t last_mw_index = (1u << 22) - 1;
/// A window's entry in fabric_state::mws (its rkey >> 8).
constexpr std::uint32_t mw_slot(std::uint32_t index) { return 0x400000u | index; }

class fabric_state {
 public:
  mutable std::mutex mu;
  condvar cv;  // completion and async events; a new wire event or timer while one sleeps
  // Threads asleep in wait_for_event: an event or timer another thread schedules may be
  // due before their sleep ends, so scheduling one wakes them (one compare otherwise).
  unsigned sleepers = 0;
  fabric_config cfg;
  /// The mock behaves as rxe where the deviation table says rxe differs.
  bool as_rxe() const noexcept { return cfg.profile == device_profile::rxe; }
  std::vector<device_rt> devices;
  clock_ns now = 0;
  mt19937_64 rng;  // random.hpp: std::mt19937_64's numbers
  // The wire, in (when, order) order: events due at the simulated time they were sent
  // (zero latency, no delay fault) queue in `wire_now`, already sorted; later ones in
  // the heap `wire_later`. `current` holds the event being run, `outbox` the message
  // being built; their buffers are reused.
  slot_ring<wire_event, true> wire_now;
  std::vector<wire_event> wire_later;
  wire_event current;
  message outbox;
  message direct;  // see issue()
  std::uint64_t order = 0;
  std::vector<qp_obj*> timed;  // QPs with a deadline (qp_obj::timed_slot)
  // QPs whose flushes are due (qp_obj::flush_due), in the order they went to ERR: linked
  // through the QPs, so queuing one allocates nothing.
  qp_obj* first_due = nullptr;
  qp_obj* last_due = nullptr;
  std::uint64_t qp_epoch = 1;  // bumped when a QP is destroyed: message hints go stale
  std::uint64_t mr_epoch = 1;  // bumped when an MR is deregistered: key caches go stale
  std::vector<fault> faults;
  std::function<void(const void*)> arm_hook;
  std::uint64_t packets = 0;
  std::uint32_t next_qpn = first_qpn;
  std::uint64_t qps_made = 0;  // qp_obj::serial
  std::vector<std::uint32_t> free_qpns;  // fabric_config::reuse_qp_numbers: destroyed QPs' numbers
  std::uint32_t next_key = first_mr_key;
  object_map<qp_obj> qps;
  object_map<mr_obj> by_lkey;
  object_map<mr_obj> by_rkey;
  object_map<mw_obj> mws;  // by rkey >> 8 (mw_slot)
  std::uint32_t next_mw = 1;
  std::uint32_t mw_wraps = 0;  // times next_mw wrapped: a new window's first key byte
  object_set<context_obj> contexts;
  object_set<pd_obj> pds;
  object_set<cq_obj> cqs;
  object_set<channel_obj> channels;
  object_set<ah_obj> ahs;
  object_set<srq_obj> srqs;
  // The connection manager (cm_verbs.hpp): channels, ids, listeners by (IPv4, port).
  object_set<cm_channel_obj> cm_channels;
  object_set<cm_id_obj> cm_ids;
  std::vector<cm_listener> cm_listeners;  // a few: searched
  std::uint16_t next_cm_port = 40000;
  std::uint32_t next_cm_psn = 1;
  bool running = false;  // guards against re-entering the event loop
  // Threads and the clock (clock.hpp, touch/jump): while paced (clock_mode::wall, or a
  // second thread has used the fabric in the last second), simulated time follows the
  // wall clock from (wall_base, sim_base).
  const void* last_thread = nullptr;  // detail::this_thread_tag() of the last caller
  // last_thread while the clock jumps, else null: touch()'s one comparison on the data
  // path; a call from another thread, or any call while paced, goes past it.
  const void* jumping_thread = nullptr;
  std::chrono::steady_clock::time_point last_switch{};
  bool paced = false;
  std::chrono::steady_clock::time_point wall_base{};
  std::uint64_t sim_base = 0;

  fabric_state() = default;
  fabric_state(const fabric_state&) = delete;
  fabric_state& operator=(const fabric_state&) = delete;
  // Like the kernel at process exit: whatever the program did not destroy is released.
  ~fabric_state() {
    for (auto& [n, q] : qps) delete q;
    for (auto& [k, m] : by_lkey) delete m;
    for (auto& [k, w] : mws) delete w;
    for (auto* a : ahs) delete a;
    for (auto* s : srqs) delete s;
    for (auto* c : cqs) delete c;
    for (auto* c : channels) delete c;
    for (auto* p : pds) delete p;
    for (auto* i : cm_ids) delete i;
    for (auto* c : cm_channels) delete c;
    for (auto* c : contexts) delete c;
  }
};

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
