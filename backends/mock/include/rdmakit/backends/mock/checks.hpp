#pragma once
// Argument checks of the verbs, with errors that say what to do.
#include <rdmakit/backends/mock/ready_fd.hpp>
#include <rdmakit/backends/mock/rules.hpp>
#include <rdmakit/detail/algorithm.hpp>
#include <rdmakit/error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

[[noreturn]] inline void fail(const char* verb, int err, const std::string& detail) {
  throw verbs_error(verb, err, detail);
}

// A device refuses objects beyond its limits as hardware does (ENOMEM). Only a check:
// the creating verb counts its object once nothing can throw any more, so a create that
// fails (an allocation included) leaves every count and table as it was.
inline void check_room(std::uint32_t count, std::uint32_t max, const char* verb, const char* what,
                       const char* limit, const device_rt& dev) {
  if (max == 0)  // (not "destroy one first": none can exist)
    fail(verb, ENOMEM,
         cat(dev.cfg.name, " supports no ", what, " (its ", limit, " is 0) (mock: raise device_config::limits.", limit,
             ")"));
  if (count >= max)
    fail(verb, ENOMEM,
         cat(max, " ", what, " exist on ", dev.cfg.name, " already (its ", limit,
             "): destroy one first (mock: or raise device_config::limits.", limit, ")"));
}

// Numbers (QP numbers, region keys, window indexes) as a device's cyclic allocator gives
// them: the first from `next` on, wrapping from `last` back to `first`, that no live
// object holds (`taken(n)`); `next` moves past it, and `wraps` (when given) counts the
// times it went from `last` to `first`. A number comes back only after the others did,
// never while its object lives. ENOMEM when `live` objects fill the range.
template <class Taken>
std::uint32_t cyclic_number(std::uint32_t& next, std::uint32_t first, std::uint32_t last, std::size_t live,
                            Taken taken, const char* verb, const char* what, std::uint32_t* wraps = nullptr) {
  if (live > std::size_t{last - first}) fail(verb, ENOMEM, cat("the mock ran out of ", what, ": destroy some first"));
  auto step = [&](std::uint32_t n) {
    if (n != last) return n + 1;
    if (wraps) ++*wraps;
    return first;
  };
  if (next < first || next > last) next = first;
  while (taken(next)) next = step(next);  // ends: a number is free
  const std::uint32_t n = next;
  next = step(n);
  return n;
}

// ibv_reg_mr pins the range's pages and fails with EFAULT when some are not mapped (a
// freed buffer, a length past its mapping): a mock that accepted them would touch the
// hole itself when a WR names it. mincore() fails with ENOMEM on an unmapped page; one
// call per 16 MiB of the page-aligned range.
inline void check_mapped(const void* addr, std::size_t length) {
  static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(addr) & ~(page - 1);
  const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(addr) + length;  // (no wrap: checked before)
  constexpr std::size_t chunk_pages = 4096;
  unsigned char resident[chunk_pages];
  for (std::uintptr_t at = first; at < end;) {
    const std::size_t pages = std::min<std::uintptr_t>(chunk_pages, (end - at + page - 1) / page);
    if (::mincore(reinterpret_cast<void*>(at), pages * page, resident) != 0 && errno == ENOMEM)
      fail("ibv_reg_mr", EFAULT,
           cat("the range ", rdmakit::detail::hex(reinterpret_cast<std::uintptr_t>(addr)), "+", length,
               " is not all mapped memory: the device cannot pin it; register memory the process has mapped (a freed buffer, or a length "
               "past the end of its allocation)"));
    at += pages * page;
  }
}

// The rights of the mappings a registration covers: a write right pins its pages for
// writing (ib_umem_get with FOLL_WRITE), which a mapping without PROT_WRITE refuses,
// EFAULT on every device; and the mock reads what a WR sends with the CPU, which a
// mapping without PROT_READ (PROT_NONE) would answer with SIGSEGV inside a post, so it
// refuses that too (rxe 6.1 registers it and sends the pages' bytes: docs/mock.md). Read
// from /proc/self/maps, the one place the kernel tells a mapping's rights; where it
// cannot be read the check is skipped. Called after check_mapped: every page is mapped.
inline void check_mapping_rights(const void* addr, std::size_t length, bool write) {
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return;
  std::uintptr_t need = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t end = need + length;
  char line[512];
  bool readable = true, writable = true;
  while (need < end && std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 || hi <= need) continue;
    if (lo > need) break;  // a hole: check_mapped's to report
    readable = readable && perms[0] == 'r';
    writable = writable && perms[1] == 'w';
    if (!readable) break;
    need = hi;
  }
  std::fclose(maps);
  const auto range = [&] {
    return cat("the range ", rdmakit::detail::hex(reinterpret_cast<std::uintptr_t>(addr)), "+", length);
  };
  if (!readable)
    fail("ibv_reg_mr", EFAULT,
         cat(range(), " holds memory the process cannot read (mapped without PROT_READ, PROT_NONE): the mock "
                      "copies what a WR sends with the CPU, so it registers none (rxe would); make the mapping "
                      "readable first"));
  if (write && !writable)
    fail("ibv_reg_mr", EFAULT,
         cat(range(), " holds memory mapped without PROT_WRITE (read-only), which a registration with a write "
                      "right (LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC) cannot pin: register it with read rights "
                      "only, or make the mapping writable"));
}

// A device's fd, a completion channel's fd, a CM channel's fd: a real verb fails when the
// process has no descriptor left (EMFILE), and so does the mock's, rather than hand out
// an object whose descriptor is -1 (an event loop then failed, naming neither).
inline void check_ready_fd(const ready_fd& r, const char* verb, const char* what) {
  if (r.fd() < 0)
    fail(verb, r.error() ? r.error() : EMFILE,
         cat("no file descriptor for ", what, " (eventfd refused): the process has none left (RLIMIT_NOFILE, "
                                             "`ulimit -n`) or the system's table is full: close some, or raise the limit"));
}

inline const port_rt& port_checked(fabric_state& f, context_obj* ctx, std::uint8_t port, const char* verb) {
  auto& dev = f.devices[ctx->dev];
  if (port < 1 || port > dev.ports.size())
    fail(verb, EINVAL,
         cat("port ", port, " does not exist on ", dev.cfg.name, " (ports are 1..", dev.ports.size(), ")"));
  return dev.ports[port - 1];
}

/// Checks an address vector against the local port it leaves from.
inline void check_av(fabric_state& f, context_obj* ctx, const ah_attr& av, const char* verb) {
  const auto& port = port_checked(f, ctx, av.port_num, verb);
  if (port.cfg.layer == link_layer::ethernet && !av.is_global)
    fail(verb, EINVAL,
         "on RoCE (Ethernet link layer) the address needs a GRH: set is_global=1, grh.dgid to the peer's GID and "
         "grh.sgid_index to a local RoCEv2 GID");
  // ENODATA: the kernel's GID table lookup (rdma_get_gid_attr), for every device.
  if (av.is_global && (av.grh.sgid_index >= port.gids.size() || !port.gids[av.grh.sgid_index].valid))
    fail(verb, ENODATA,
         cat("grh.sgid_index ", av.grh.sgid_index, " is not a valid GID on port ", av.port_num,
             " (use query_gid to list the table)"));
  if (!av.is_global && av.dlid == 0)
    fail(verb, EINVAL, "the address has neither a GRH nor a destination LID");
}

inline void validate_attr(fabric_state& f, qp_obj* q, const qp_attr& a, qp_attr_mask mask) {
  using m = qp_attr_mask;
  auto& dev = device_of(q);
  const char* verb = "ibv_modify_qp";
  auto bad = [&](const std::string& what) {
    fail(verb, EINVAL, cat(to_string(q->type), " QP ", rdmakit::detail::hex(q->qpn), ": ", what));
  };
  std::uint8_t port = has_all(mask, m::port) ? a.port_num : q->attr.port_num;
  if (has_all(mask, m::port) && (a.port_num < 1 || a.port_num > dev.ports.size()))
    bad(cat("port ", a.port_num, " does not exist on ", dev.cfg.name));
  if (has_all(mask, m::pkey_index) && a.pkey_index != 0) bad("pkey_index must be 0 (the table has one entry)");
  if (has_all(mask, m::access_flags) &&
      !has_all(access::local_write | access::remote_write | access::remote_read | access::remote_atomic,
               a.access_flags))
    bad("unknown bits in qp_access_flags");
  if (has_all(mask, m::path_mtu)) {
    if (mtu_bytes(a.path_mtu) == 0) bad("path_mtu is not a valid MTU value");
    if (port >= 1 && port <= dev.ports.size() && a.path_mtu > dev.ports[port - 1].cfg.max_mtu)
      bad(cat("path_mtu ", mtu_bytes(a.path_mtu), " is above the port's max MTU ",
              mtu_bytes(dev.ports[port - 1].cfg.max_mtu)));
  }
  if (has_all(mask, m::timeout) && a.timeout > 31) bad(cat("timeout ", a.timeout, " > 31"));
  if (has_all(mask, m::retry_cnt) && a.retry_cnt > 7) bad("retry_cnt > 7");
  if (has_all(mask, m::rnr_retry) && a.rnr_retry > 7) bad("rnr_retry > 7");
  if (has_all(mask, m::min_rnr_timer) && a.min_rnr_timer > 31) bad("min_rnr_timer > 31");
  if (has_all(mask, m::max_qp_rd_atomic) && a.max_rd_atomic > dev.cfg.limits.max_qp_init_rd_atom)
    bad(cat("max_rd_atomic ", a.max_rd_atomic, " exceeds the device's max_qp_init_rd_atom ",
            dev.cfg.limits.max_qp_init_rd_atom));
  if (has_all(mask, m::max_dest_rd_atomic) && a.max_dest_rd_atomic > dev.cfg.limits.max_qp_rd_atom)
    bad(cat("max_dest_rd_atomic ", a.max_dest_rd_atomic, " exceeds the device's max_qp_rd_atom ",
            dev.cfg.limits.max_qp_rd_atom));
  if (has_all(mask, m::dest_qpn) && a.dest_qp_num > psn_mask) bad("dest_qp_num is wider than 24 bits");
  if (has_all(mask, m::av)) {
    // The kernel checks the AV's own port (rxe refuses port 2 of one), and the RoCE
    // address resolution an all-zero GID (rxe, observed: audit 36).
    if (a.av.port_num < 1 || a.av.port_num > dev.ports.size())
      bad(cat("av.port_num ", a.av.port_num, " does not exist on ", dev.cfg.name, " (ports are 1..", dev.ports.size(),
              "): set it to the port the QP leaves from"));
    if (a.av.is_global && a.av.grh.dgid.is_zero())
      bad("address vector: grh.dgid is all zeros: set it to the peer's GID");
    ah_attr av = a.av;
    av.port_num = port;
    try {
      check_av(f, q->pd->ctx, av, verb);
    } catch (const verbs_error& e) {
      fail(verb, e.errno_value(), cat(to_string(q->type), " QP ", rdmakit::detail::hex(q->qpn), ": address vector: ",
                                      e.detail()));
    }
  }
}

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
