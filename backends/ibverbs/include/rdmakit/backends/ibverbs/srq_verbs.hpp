#pragma once
// The ibverbs backend's shared-receive-queue setup verbs: creation checked against the
// device limits first (a device without SRQs is named as such), the limit armed with
// ibv_modify_srq (ibv_create_srq ignores srq_limit on some devices and arms it on
// others, so it is always created at 0), and the query.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/ibverbs/convert.hpp>
#include <rdmakit/backends/ibverbs/setup_verbs.hpp>
#include <rdmakit/backends/ibverbs/support.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/types.hpp>

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace ibverbs::detail {

RDMAKIT_DECL ibv_srq* create_srq(ibv_pd* p, srq_attr& attr) {
  if (!p) throw verbs_error("ibv_create_srq", EINVAL, "no protection domain");
  ibv_context* ctx = p->context;
  const ibv_device_attr lim = query_raw(ctx);
  const std::string what = cat("SRQ on ", ctx_name(ctx));
  if (lim.max_srq <= 0)
    throw verbs_error("ibv_create_srq", EOPNOTSUPP, cat(what, ": the device has no shared receive queues"));
  auto range = [&](const char* field, std::uint32_t asked, const char* limit, int max) {
    if (asked == 0 || static_cast<long long>(asked) > max)
      throw verbs_error("ibv_create_srq", EINVAL,
                        cat(what, ": ", field, "=", asked, " is outside 1..", limit, "=", max,
                            "; ask for at most that"));
  };
  range("max_wr", attr.max_wr, "max_srq_wr", lim.max_srq_wr);
  range("max_sge", attr.max_sge, "max_srq_sge", lim.max_srq_sge);
  ibv_srq_init_attr ia;
  std::memset(&ia, 0, sizeof ia);
  ia.attr.max_wr = attr.max_wr;
  ia.attr.max_sge = attr.max_sge;
  errno = 0;
  ibv_srq* s = ibv_create_srq(p, &ia);
  if (!s) {
    const int err = null_errno();
    throw verbs_error("ibv_create_srq", err,
                      cat(what, " with max_wr=", attr.max_wr, " max_sge=", attr.max_sge,
                          err == ENOMEM ? ": out of SRQ resources, or " : "", err == ENOMEM ? memlock_hint() : ""));
  }
  attr.max_wr = ia.attr.max_wr;
  attr.max_sge = ia.attr.max_sge;
  if (attr.limit) {
    ibv_srq_attr a;
    std::memset(&a, 0, sizeof a);
    a.srq_limit = attr.limit;
    if (int err = rc_errno(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT))) {
      ibv_destroy_srq(s);
      throw verbs_error("ibv_modify_srq", err,
                        cat(what, ": arming limit=", attr.limit, " (it must be at most max_wr=", attr.max_wr, ")"));
    }
  }
  return s;
}

RDMAKIT_DECL srq_attr query_srq(ibv_srq* s) {
  ibv_srq_attr a;
  std::memset(&a, 0, sizeof a);
  if (int err = rc_errno(ibv_query_srq(s, &a)))
    throw verbs_error("ibv_query_srq", err, cat("SRQ on ", ctx_name(s->context)));
  srq_attr o;
  o.max_wr = a.max_wr;
  o.max_sge = a.max_sge;
  o.limit = a.srq_limit;
  return o;
}

}  // namespace ibverbs::detail
RDMAKIT_END_NAMESPACE
