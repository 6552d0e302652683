#pragma once
// A backend that does (almost) nothing, so a benchmark measures the code around the
// verbs calls instead of the device. It satisfies rdmakit::verbs_backend:
//  - post_send walks the WR list, counts it, and for every signaled WR queues a
//    successful completion on the QP's send CQ (a ring of wr_id/qp_num/opcode);
//  - poll_cq hands those completions back, up to n at a time;
//  - everything else is the minimum that lets the policy layer create a device, PD,
//    regions, CQs and connected QPs (one InfiniBand port, GID 0, no GRH);
//  - for the receive paths (bench/overhead_paths.cpp): post_recv keeps the posted
//    wr_ids in an RQ ring, `arrive(qp, n, ...)` completes the n oldest of them on the
//    QP's receive CQ as a peer's SENDs would, and a CQ marked with carry_receives()
//    (before its QPs are created) hands back their byte_len, immediate data and flags.
//    An unmarked CQ runs exactly the code it always did (bench/overhead.cpp's counts).
// post_send, post_recv and poll_cq call the "provider" through function pointers in
// the QP and CQ objects, as ibv_post_send/ibv_poll_cq call through
// `qp->context->ops`: the compiler knows nothing of what they touch, so in the raw and
// the policy loops alike every counter kept in memory is stored before the call and
// loaded again after it, as with a real device. (A direct call to a function in the
// same translation unit let GCC prove that the raw loop's counters survive the call
// and keep them in registers: an advantage no verbs program has.)
#include <rdmakit/backend.hpp>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rdmakit_bench {

struct null_backend {
  struct context_t {
    int unused = 0;
  };
  struct pd_t {
    context_t* ctx = nullptr;
  };
  struct mr_t {
    std::uint32_t key = 0;
  };
  struct channel_t {
    int unused = 0;
  };
  struct ah_t {
    int unused = 0;
  };
  struct cq_t;
  struct qp_t;
  struct send_wr;
  struct recv_wr;
  struct wc;
  /// The provider's entry points, as in ibv_context_ops.
  struct provider_ops {
    int (*post_send)(qp_t*, send_wr*, send_wr**) noexcept;
    int (*post_recv)(qp_t*, recv_wr*, recv_wr**) noexcept;
    int (*poll_cq)(cq_t*, int, wc*) noexcept;
    // The wire: n messages from the peer take the n oldest posted receives and complete
    // them on the QP's receive CQ (byte_len bytes; RECV_RDMA_WITH_IMM and `imm` when
    // with_imm). A driver's stand-in for the peer's SENDs, called the same way by the
    // hand-written and the policy loops.
    int (*arrive)(qp_t*, int n, std::uint32_t byte_len, bool with_imm, std::uint32_t imm) noexcept;
  };
  struct cq_t {
    static constexpr std::uint32_t ring_size = 4096;  // power of two
    const provider_ops* ops = nullptr;
    struct entry {
      std::uint64_t wr_id;
      std::uint32_t qp_num;
      rdmakit::wc_opcode op;
    };
    int capacity = 0;
    std::uint32_t head = 0;  // next to poll
    std::uint32_t tail = 0;  // next to fill
    entry ring[ring_size];
    // A carry_receives() CQ: each entry's byte_len, immediate data and flags (0 for a
    // send's), beside the ring so that an unmarked CQ's entries stay as they were.
    struct rx_fields {
      std::uint32_t byte_len;
      std::uint32_t imm;
      rdmakit::wc_flags flags;
    };
    rx_fields rx[ring_size];
  };
  struct qp_t {
    const provider_ops* ops = nullptr;
    cq_t* send_cq = nullptr;
    cq_t* recv_cq = nullptr;
    std::uint32_t num = 0;
    rdmakit::qp_state state = rdmakit::qp_state::reset;
    std::uint64_t sends = 0;  // WRs posted
    std::uint64_t recvs = 0;
    // The posted receives' wr_ids, oldest first, as a provider's RQ holds its WQEs.
    static constexpr std::uint32_t rq_ring = 4096;
    std::uint32_t rq_head = 0, rq_tail = 0;
    std::uint64_t rq[rq_ring];
  };

  using context = context_t*;
  using pd = pd_t*;
  using mr = mr_t*;
  using cq = cq_t*;
  using channel = channel_t*;
  using qp = qp_t*;
  using ah = ah_t*;
  /// Laid out like ibv_sge. The native structs have no member initializers, as
  /// libibverbs' C structs: a WR or completion array on the stack costs nothing to declare.
  struct sge {
    std::uint64_t addr;
    std::uint32_t length;
    std::uint32_t lkey;
  };

  /// Laid out like ibv_send_wr (the fields rdmakit sets).
  struct send_wr {
    std::uint64_t wr_id;
    send_wr* next;
    sge* sg_list;
    int num_sge;
    rdmakit::opcode op;
    rdmakit::send_flags flags;
    std::uint32_t imm_data;
    std::uint64_t remote_addr;
    std::uint32_t rkey;
    std::uint64_t compare_add;
    std::uint64_t swap;
    ah address;
    std::uint32_t remote_qpn;
    std::uint32_t remote_qkey;
  };
  struct recv_wr {
    std::uint64_t wr_id;
    recv_wr* next;
    sge* sg_list;
    int num_sge;
  };
  /// Laid out like ibv_wc.
  struct wc {
    std::uint64_t wr_id;
    rdmakit::wc_status status;
    rdmakit::wc_opcode opcode;
    std::uint32_t vendor_err;
    std::uint32_t byte_len;
    std::uint32_t imm_data;
    std::uint32_t qp_num;
    std::uint32_t src_qp;
    rdmakit::wc_flags flags;
    std::uint16_t pkey_index;
    std::uint16_t slid;
    std::uint8_t sl;
    std::uint8_t dlid_path_bits;
  };

  static constexpr std::string_view name = "null";

  // ---- control path: just enough for the policy layer's setup --------------------------
  static std::vector<std::string> device_names() { return {"null0"}; }
  static context open_device(std::string_view) { return new context_t; }
  static void close_device(context c) noexcept { delete c; }
  static std::string device_name(context) { return "null0"; }
  static rdmakit::device_attr query_device(context) {
    rdmakit::device_attr a;
    a.max_mr_size = ~std::uint64_t{0};
    a.max_qp = a.max_cq = a.max_mr = a.max_pd = a.max_ah = 1u << 16;
    a.max_qp_wr = cq_t::ring_size;
    a.max_sge = 32;
    a.max_cqe = static_cast<std::uint32_t>(cq_t::ring_size);
    a.max_qp_rd_atom = a.max_qp_init_rd_atom = 16;
    a.atomics = true;
    a.phys_port_cnt = 1;
    return a;
  }
  static rdmakit::port_attr query_port(context, std::uint8_t) {
    rdmakit::port_attr p;
    p.state = rdmakit::port_state::active;
    p.max_mtu = p.active_mtu = rdmakit::mtu::mtu_4096;
    p.gid_tbl_len = 1;
    p.max_msg_sz = 1u << 31;
    p.lid = 1;
    p.layer = rdmakit::link_layer::infiniband;
    return p;
  }
  static rdmakit::gid_entry query_gid(context, std::uint8_t, int index) {
    rdmakit::gid_entry e;
    e.index = static_cast<std::uint32_t>(index);
    e.valid = index == 0;
    if (e.valid) {
      e.value.raw[0] = 0xfe;
      e.value.raw[1] = 0x80;
      e.value.raw[15] = 1;
    }
    return e;
  }
  static int get_async_event(context, std::chrono::milliseconds, rdmakit::async_event&) noexcept {
    return ETIMEDOUT;
  }

  static pd alloc_pd(context c) { return new pd_t{c}; }
  static int dealloc_pd(pd p) noexcept {
    delete p;
    return 0;
  }
  static mr reg_mr(pd, void*, std::size_t, rdmakit::access) {
    static std::uint32_t next = 0x100;
    return new mr_t{next++};
  }
  static int dereg_mr(mr m) noexcept {
    delete m;
    return 0;
  }
  static std::uint32_t mr_lkey(mr m) noexcept { return m->key; }
  static std::uint32_t mr_rkey(mr m) noexcept { return m->key; }
  static ah create_ah(pd, const rdmakit::ah_attr&) { return new ah_t; }
  static int destroy_ah(ah a) noexcept {
    delete a;
    return 0;
  }

  static channel create_comp_channel(context) { return new channel_t; }
  static int destroy_comp_channel(channel c) noexcept {
    delete c;
    return 0;
  }
  static cq create_cq(context, int cqe, channel, int) {
    auto* c = new cq_t;
    c->ops = &ops;
    c->capacity = cqe;
    return c;
  }
  static int cq_capacity(cq c) noexcept { return c->capacity; }
  static int destroy_cq(cq c) noexcept {
    delete c;
    return 0;
  }
  static int poll_cq(cq c, int n, wc* out) noexcept { return c->ops->poll_cq(c, n, out); }
  /// Marks `c` as carrying receive completions' fields (rx_ops). Call it before the QPs
  /// on it are created: a QP takes its send CQ's provider entries.
  static void carry_receives(cq c) noexcept { c->ops = &rx_ops; }
  template <bool Rx>
  [[gnu::noinline]] static int provider_poll_cq(cq c, int n, wc* out) noexcept {
    int got = 0;
    while (got < n && c->head != c->tail) {
      const auto& e = c->ring[c->head & (cq_t::ring_size - 1)];
      wc& w = out[got++];
      w.wr_id = e.wr_id;
      w.status = rdmakit::wc_status::success;
      w.opcode = e.op;
      if constexpr (Rx) {
        const auto& r = c->rx[c->head & (cq_t::ring_size - 1)];
        w.byte_len = r.byte_len;
        w.imm_data = r.imm;
        w.flags = r.flags;
      } else {
        w.byte_len = 0;
        w.flags = rdmakit::wc_flags::none;
      }
      w.qp_num = e.qp_num;
      ++c->head;
    }
    return got;
  }
  static int req_notify_cq(cq, bool) noexcept { return 0; }
  static int get_cq_event(channel, std::chrono::milliseconds, cq&) noexcept { return ETIMEDOUT; }
  static void ack_cq_events(cq, unsigned) noexcept {}

  static qp create_qp(pd, cq send_cq, cq recv_cq, rdmakit::qp_type, rdmakit::qp_cap&, bool) {
    static std::uint32_t next = 0x11;
    auto* q = new qp_t;  // (the RQ ring is left uninitialized: only posted slots are read)
    q->ops = send_cq->ops;
    q->send_cq = send_cq;
    q->recv_cq = recv_cq;
    q->num = next++;
    return q;
  }
  static int destroy_qp(qp q) noexcept {
    delete q;
    return 0;
  }
  static std::uint32_t qp_num(qp q) noexcept { return q->num; }
  static void modify_qp(qp q, const rdmakit::qp_attr& a, rdmakit::qp_attr_mask) { q->state = a.state; }
  static rdmakit::qp_state query_qp_state(qp q) { return q->state; }

  static int post_send(qp q, send_wr* wr, send_wr** bad) noexcept { return q->ops->post_send(q, wr, bad); }
  static int post_recv(qp q, recv_wr* wr, recv_wr** bad) noexcept { return q->ops->post_recv(q, wr, bad); }
  template <bool Rx>
  [[gnu::noinline]] static int provider_post_send(qp q, send_wr* wr, send_wr** bad) noexcept {
    cq_t& c = *q->send_cq;
    for (; wr; wr = wr->next) {
      ++q->sends;
      if (rdmakit::has_any(wr->flags, rdmakit::send_flags::signaled)) {
        if (c.tail - c.head == cq_t::ring_size) {  // a real CQ would overrun
          if (bad) *bad = wr;
          return ENOMEM;
        }
        if constexpr (Rx) c.rx[c.tail & (cq_t::ring_size - 1)] = {0, 0, rdmakit::wc_flags::none};
        c.ring[c.tail++ & (cq_t::ring_size - 1)] = {wr->wr_id, q->num, to_wc_opcode(wr->op)};
      }
    }
    if (bad) *bad = nullptr;
    return 0;
  }
  [[gnu::noinline]] static int provider_post_recv(qp q, recv_wr* wr, recv_wr** bad) noexcept {
    for (; wr; wr = wr->next) {
      if (q->rq_tail - q->rq_head == qp_t::rq_ring) {
        if (bad) *bad = wr;
        return ENOMEM;
      }
      ++q->recvs;
      q->rq[q->rq_tail++ & (qp_t::rq_ring - 1)] = wr->wr_id;
    }
    if (bad) *bad = nullptr;
    return 0;
  }
  [[gnu::noinline]] static int provider_arrive(qp q, int n, std::uint32_t byte_len, bool with_imm,
                                               std::uint32_t imm) noexcept {
    cq_t& c = *q->recv_cq;
    int done = 0;
    for (; done < n && q->rq_head != q->rq_tail && c.tail - c.head != cq_t::ring_size; ++done) {
      c.rx[c.tail & (cq_t::ring_size - 1)] = {byte_len, with_imm ? imm : 0,
                                              with_imm ? rdmakit::wc_flags::with_imm : rdmakit::wc_flags::none};
      c.ring[c.tail++ & (cq_t::ring_size - 1)] = {
          q->rq[q->rq_head++ & (qp_t::rq_ring - 1)], q->num,
          with_imm ? rdmakit::wc_opcode::recv_rdma_with_imm : rdmakit::wc_opcode::recv};
    }
    return done;
  }
  /// n messages arrive for q from its peer (provider_ops::arrive); q's receive CQ should
  /// be a carry_receives() one, or their byte_len and immediate data read 0.
  static int arrive(qp q, int n, std::uint32_t byte_len, bool with_imm = false, std::uint32_t imm = 0) noexcept {
    return q->ops->arrive(q, n, byte_len, with_imm, imm);
  }
  static constexpr provider_ops ops{&provider_post_send<false>, &provider_post_recv, &provider_poll_cq<false>,
                                    &provider_arrive};
  static constexpr provider_ops rx_ops{&provider_post_send<true>, &provider_post_recv, &provider_poll_cq<true>,
                                       &provider_arrive};

  // ---- building WRs and reading completions: plain field accesses, as in ibverbs ------
  static void set_sge(sge& s, std::uint64_t addr, std::uint32_t length, std::uint32_t lkey) noexcept {
    s.addr = addr;
    s.length = length;
    s.lkey = lkey;
  }
  static rdmakit::send_wr_facts describe_send(const send_wr& w) noexcept {
    rdmakit::send_wr_facts f{w.op, w.flags, w.num_sge, 0, w.remote_addr};
    for (int i = 0; i < w.num_sge && w.sg_list; ++i) f.length += w.sg_list[i].length;
    return f;
  }
  static void set_send(send_wr& w, std::uint64_t wr_id, rdmakit::opcode op, rdmakit::send_flags fl, sge* list,
                       int n) noexcept {
    w.wr_id = wr_id;
    w.next = nullptr;
    w.sg_list = list;
    w.num_sge = n;
    w.op = op;
    w.flags = fl;
  }
  static void set_next(send_wr& w, send_wr* next) noexcept { w.next = next; }
  static void set_send_flags(send_wr& w, rdmakit::send_flags fl) noexcept { w.flags = fl; }
  static void set_wr_id(send_wr& w, std::uint64_t wr_id) noexcept { w.wr_id = wr_id; }
  static void set_imm(send_wr& w, std::uint32_t imm) noexcept { w.imm_data = imm; }
  static void set_rdma(send_wr& w, std::uint64_t raddr, std::uint32_t rkey) noexcept {
    w.remote_addr = raddr;
    w.rkey = rkey;
  }
  static void set_atomic(send_wr& w, std::uint64_t raddr, std::uint32_t rkey, std::uint64_t compare_add,
                         std::uint64_t swap) noexcept {
    w.remote_addr = raddr;
    w.rkey = rkey;
    w.compare_add = compare_add;
    w.swap = swap;
  }
  static void set_ud(send_wr& w, ah a, std::uint32_t qpn, std::uint32_t qkey) noexcept {
    w.address = a;
    w.remote_qpn = qpn;
    w.remote_qkey = qkey;
  }
  static void set_recv(recv_wr& w, std::uint64_t wr_id, sge* list, int n) noexcept {
    w.wr_id = wr_id;
    w.next = nullptr;
    w.sg_list = list;
    w.num_sge = n;
  }
  static void set_next(recv_wr& w, recv_wr* next) noexcept { w.next = next; }

  static std::uint64_t get_wr_id(const wc& w) noexcept { return w.wr_id; }
  static rdmakit::wc_status get_status(const wc& w) noexcept { return w.status; }
  static rdmakit::wc_opcode get_opcode(const wc& w) noexcept { return w.opcode; }
  static std::uint32_t get_byte_len(const wc& w) noexcept { return w.byte_len; }
  static std::uint32_t get_qp_num(const wc& w) noexcept { return w.qp_num; }
  static std::uint32_t get_src_qp(const wc& w) noexcept { return w.src_qp; }
  static std::uint16_t get_slid(const wc& w) noexcept { return w.slid; }
  static std::uint8_t get_sl(const wc& w) noexcept { return w.sl; }
  static rdmakit::wc_flags get_wc_flags(const wc& w) noexcept { return w.flags; }
  static std::uint32_t get_imm(const wc& w) noexcept { return w.imm_data; }
  static std::uint32_t get_vendor_err(const wc& w) noexcept { return w.vendor_err; }

 private:
  static rdmakit::wc_opcode to_wc_opcode(rdmakit::opcode op) noexcept {
    using rdmakit::opcode;
    using rdmakit::wc_opcode;
    switch (op) {
      case opcode::rdma_write:
      case opcode::rdma_write_with_imm: return wc_opcode::rdma_write;
      case opcode::rdma_read: return wc_opcode::rdma_read;
      case opcode::atomic_cmp_and_swp: return wc_opcode::comp_swap;
      case opcode::atomic_fetch_and_add: return wc_opcode::fetch_add;
      case opcode::bind_mw: return wc_opcode::bind_mw;
      case opcode::local_inv: return wc_opcode::local_inv;
      case opcode::send:
      case opcode::send_with_imm:
      case opcode::send_with_inv: break;
    }
    return wc_opcode::send;
  }
};

static_assert(rdmakit::verbs_backend<null_backend>);

}  // namespace rdmakit_bench
