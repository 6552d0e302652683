// raw_verbs_write — the hand-written reference for bench/rxe_instructions.sh: RDMA WRITE
// message rate with plain libibverbs calls, written the way a bandwidth test posts:
//
// - two RC queue pairs on one device (one process), connected to each other through the
//   port's GID (rxe loopback); the first only posts, the second is the WRITEs' target and
//   does no CPU work (one-sided);
// - the WRs are built once (a linked list of `-l` WRs, one SGE, inline when the size
//   allows and -I permits); per post only wr_id and send_flags change (with post list
//   32 and -Q 16 only the wr_id of the two signaled WRs: see write_loop);
// - send-queue credits: never post a list the send queue has no room for; a slot comes
//   back when a signaled WR at or after it completes;
// - a signaled WR every `-Q` WRs (and the last one), everything else unsignaled;
// - every ibv_post_send's return value and every completion's status are checked.
//
//   raw_verbs_write [-d DEV] [-i PORT] [-x GID_INDEX] [-s BYTES] [-n WRS] [-l LIST]
//                   [-Q SIGNAL_EVERY] [-t SQ_DEPTH] [-I MAX_INLINE]
//
// Defaults: -d $RDMAKIT_DEVICE (else the first device), -i 1, -x $RDMAKIT_GID_INDEX
// (else 1), -s 64, -n 8192, -l 1, -Q 16, -t 128, -I 220. Prints one line with the counts
// and the message rate (meaningless under emulation; instruction counts are what
// rxe_instructions.sh reads). Exit 0 when every WR completed successfully.
#include <infiniband/verbs.h>

#include <arpa/inet.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct options {
  std::string device;
  int port = 1;
  int gid_index = 1;
  std::uint32_t size = 64;
  std::uint64_t iters = 8192;
  std::uint32_t list = 1;
  std::uint32_t signal_every = 16;
  std::uint32_t depth = 128;
  std::uint32_t max_inline = 220;
};

[[noreturn]] void die(const char* what, int err = 0) {
  if (err)
    std::fprintf(stderr, "raw_verbs_write: %s: %s\n", what, std::strerror(err));
  else
    std::fprintf(stderr, "raw_verbs_write: %s\n", what);
  std::exit(1);
}

struct run_state {
  ibv_qp* qp;
  ibv_cq* cq;
  ibv_send_wr* wrs;  // `list` WRs, linked
  std::uint32_t inline_flag;
};

// Reaps what the CQ has (up to 16): checks every status; a signaled WR's completion
// completes every WR before it. Returns the completions found.
inline int reap(ibv_cq* cq, std::uint64_t& completed) {
  ibv_wc wc[16];
  const int ne = ibv_poll_cq(cq, 16, wc);
  if (ne < 0) die("ibv_poll_cq failed");
  for (int i = 0; i < ne; ++i) {
    if (wc[i].status != IBV_WC_SUCCESS) {
      std::fprintf(stderr, "raw_verbs_write: WR %llu completed with %s\n",
                   static_cast<unsigned long long>(wc[i].wr_id), ibv_wc_status_str(wc[i].status));
      std::exit(1);
    }
    completed = wc[i].wr_id + 1;
  }
  return ne;
}

// The data phase: post `iters` WRITEs in lists of `list`, reap every signaled
// completion. Returns the number of polls that found completions.
//
// When the list length is a multiple of the signaling interval and of `iters` (post list
// 32, -Q 16), every list has the same signaled positions: the flags were set once and a
// post only writes the wr_id of its signaled WRs (what a careful hand-written loop does;
// perftest's list loop also leaves its WRs alone). With one WR per post, wr_id and flags
// are written per post and a countdown says which WR is signaled. Other lists: each WR's
// wr_id and flags are written before the post.
__attribute__((noinline)) std::uint64_t write_loop(const run_state& s, const options& o) {
  const std::uint64_t n = o.iters;
  const std::uint32_t list = o.list, every = o.signal_every, depth = o.depth;
  std::uint64_t posted = 0, completed = 0, polls = 0;
  if (list > 1 && list % every == 0 && n % list == 0) {
    for (std::uint32_t k = 0; k < list; ++k)
      s.wrs[k].send_flags = s.inline_flag | (k % every == every - 1 ? static_cast<unsigned>(IBV_SEND_SIGNALED) : 0u);
    while (completed < n) {
      while (posted < n && posted - completed + list <= depth) {
        for (std::uint32_t k = every - 1; k < list; k += every) s.wrs[k].wr_id = posted + k;
        ibv_send_wr* bad = nullptr;
        if (int rc = ibv_post_send(s.qp, s.wrs, &bad)) die("ibv_post_send", rc);
        posted += list;
      }
      if (reap(s.cq, completed) > 0) ++polls;
    }
    return polls;
  }
  if (list == 1) {
    // One WR per post: a countdown to the next signaled WR (no division per WR).
    ibv_send_wr& w = s.wrs[0];
    std::uint32_t left = every;
    while (completed < n) {
      while (posted < n && posted - completed < depth) {
        w.wr_id = posted;
        bool signaled = --left == 0;
        if (signaled) left = every;
        signaled |= posted == n - 1;
        w.send_flags = s.inline_flag | (signaled ? static_cast<unsigned>(IBV_SEND_SIGNALED) : 0u);
        ibv_send_wr* bad = nullptr;
        if (int rc = ibv_post_send(s.qp, &w, &bad)) die("ibv_post_send", rc);
        ++posted;
      }
      if (reap(s.cq, completed) > 0) ++polls;
    }
    return polls;
  }
  while (completed < n) {
    // Post while the send queue has room for a whole list.
    while (posted < n && posted - completed + list <= depth) {
      std::uint32_t k = 0;
      for (; k < list && posted + k < n; ++k) {
        const std::uint64_t seq = posted + k;
        ibv_send_wr& w = s.wrs[k];
        w.wr_id = seq;
        w.send_flags = s.inline_flag |
                       ((seq % every == every - 1 || seq == n - 1) ? static_cast<unsigned>(IBV_SEND_SIGNALED) : 0u);
      }
      s.wrs[k - 1].next = nullptr;  // a short last list
      ibv_send_wr* bad = nullptr;
      if (int rc = ibv_post_send(s.qp, s.wrs, &bad)) die("ibv_post_send", rc);
      if (k < list) s.wrs[k - 1].next = &s.wrs[k];
      posted += k;
    }
    if (reap(s.cq, completed) > 0) ++polls;
  }
  return polls;
}

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq, const options& o, std::uint32_t& max_inline) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 0;
  a.cap.max_send_wr = o.depth;
  a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = o.max_inline;
  ibv_qp* qp = ibv_create_qp(pd, &a);
  if (!qp) die("ibv_create_qp", errno);
  max_inline = a.cap.max_inline_data;
  return qp;
}

void to_init(ibv_qp* qp, const options& o) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<std::uint8_t>(o.port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("ibv_modify_qp INIT", rc);
}

void to_rts(ibv_qp* qp, std::uint32_t dest_qpn, const ibv_gid& gid, ibv_mtu mtu, const options& o) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(o.gid_index);
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = static_cast<std::uint8_t>(o.port);
  if (int rc = ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("ibv_modify_qp RTR", rc);
  ibv_qp_attr b{};
  b.qp_state = IBV_QPS_RTS;
  b.timeout = 14;
  b.retry_cnt = 7;
  b.rnr_retry = 7;
  b.sq_psn = 0;
  b.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(qp, &b,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                 IBV_QP_MAX_QP_RD_ATOMIC))
    die("ibv_modify_qp RTS", rc);
}

std::uint64_t number(const char* s, const char* opt) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (!*s || *end) {
    std::fprintf(stderr, "raw_verbs_write: %s wants a number, got %s\n", opt, s);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const char* d = std::getenv("RDMAKIT_DEVICE")) o.device = d;
  if (const char* g = std::getenv("RDMAKIT_GID_INDEX")) o.gid_index = static_cast<int>(number(g, "RDMAKIT_GID_INDEX"));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("raw_verbs_write [-d DEV] [-i PORT] [-x GID_INDEX] [-s BYTES] [-n WRS] [-l LIST] [-Q EVERY] [-t DEPTH] [-I INLINE]\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "raw_verbs_write: %s wants a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "-d") o.device = v;
    else if (a == "-i") o.port = static_cast<int>(number(v, "-i"));
    else if (a == "-x") o.gid_index = static_cast<int>(number(v, "-x"));
    else if (a == "-s") o.size = static_cast<std::uint32_t>(number(v, "-s"));
    else if (a == "-n") o.iters = number(v, "-n");
    else if (a == "-l") o.list = static_cast<std::uint32_t>(number(v, "-l"));
    else if (a == "-Q") o.signal_every = static_cast<std::uint32_t>(number(v, "-Q"));
    else if (a == "-t") o.depth = static_cast<std::uint32_t>(number(v, "-t"));
    else if (a == "-I") o.max_inline = static_cast<std::uint32_t>(number(v, "-I"));
    else {
      std::fprintf(stderr, "raw_verbs_write: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (o.list < 1 || o.list > o.depth || o.signal_every < 1 || o.signal_every > o.depth || o.iters < 1)
    die("need 1 <= -l <= -t, 1 <= -Q <= -t and -n >= 1");

  int ndev = 0;
  ibv_device** devs = ibv_get_device_list(&ndev);
  if (!devs || ndev == 0) die("no RDMA device");
  ibv_device* dev = nullptr;
  for (int i = 0; i < ndev; ++i)
    if (o.device.empty() || o.device == ibv_get_device_name(devs[i])) {
      dev = devs[i];
      break;
    }
  if (!dev) die("device not found");
  ibv_context* ctx = ibv_open_device(dev);
  if (!ctx) die("ibv_open_device", errno);
  ibv_port_attr pa{};
  if (int rc = ibv_query_port(ctx, static_cast<std::uint8_t>(o.port), &pa)) die("ibv_query_port", rc);
  ibv_gid gid{};
  if (int rc = ibv_query_gid(ctx, static_cast<std::uint8_t>(o.port), o.gid_index, &gid)) die("ibv_query_gid", rc);

  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (!pd) die("ibv_alloc_pd", errno);
  const std::size_t slot = (o.size + 63) / 64 * 64;
  std::vector<char> buf(2 * slot + 64, 0);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) die("ibv_reg_mr", errno);
  ibv_cq* scq = ibv_create_cq(ctx, static_cast<int>(o.depth), nullptr, nullptr, 0);
  ibv_cq* tcq = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
  if (!scq || !tcq) die("ibv_create_cq", errno);
  std::uint32_t inline_a = 0, inline_b = 0;
  ibv_qp* a = make_qp(pd, scq, o, inline_a);
  ibv_qp* b = make_qp(pd, tcq, o, inline_b);
  to_init(a, o);
  to_init(b, o);
  const ibv_mtu mtu = pa.active_mtu;
  to_rts(a, b->qp_num, gid, mtu, o);
  to_rts(b, a->qp_num, gid, mtu, o);

  // The WR list: source slot 0, destination slot 1 of the same region.
  std::vector<ibv_sge> sge(o.list);
  std::vector<ibv_send_wr> wrs(o.list);
  for (std::uint32_t k = 0; k < o.list; ++k) {
    sge[k].addr = reinterpret_cast<std::uintptr_t>(buf.data());
    sge[k].length = o.size;
    sge[k].lkey = mr->lkey;
    ibv_send_wr& w = wrs[k];
    std::memset(&w, 0, sizeof w);
    w.sg_list = &sge[k];
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(buf.data() + slot);
    w.wr.rdma.rkey = mr->rkey;
    w.next = k + 1 < o.list ? &wrs[k + 1] : nullptr;
  }
  const run_state s{a, scq, wrs.data(), o.size <= inline_a ? static_cast<std::uint32_t>(IBV_SEND_INLINE) : 0u};

  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t polls = write_loop(s, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("raw_verbs_write: %s port %d gid %d, RC, %u B%s, %llu WRs, post list %u, signal every %u, SQ %u: "
              "%llu polls with completions, %.3f Mpps\n",
              ibv_get_device_name(dev), o.port, o.gid_index, o.size, s.inline_flag ? " inline" : "",
              static_cast<unsigned long long>(o.iters), o.list, o.signal_every, o.depth,
              static_cast<unsigned long long>(polls), secs > 0 ? static_cast<double>(o.iters) / secs / 1e6 : 0.0);

  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_destroy_cq(scq);
  ibv_destroy_cq(tcq);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(devs);
  return 0;
}
