#pragma once
// Automatic GID choice, generic over any verbs_backend (it needs only query_port,
// query_gid and device_name). The rule, in order:
//   Ethernet (RoCE):  a RoCEv2 GID holding an IPv4-mapped address (::ffff:a.b.c.d),
//                     then a RoCEv2 GID that is not link-local (a routable IPv6
//                     address), then any RoCEv2 GID, then any RoCEv1 GID; within a
//                     tier the lowest index wins. Only indexes 0..255: an address
//                     vector's sgid_index has 8 bits.
//   InfiniBand (and "unspecified", which old kernels report for IB): index 0.
// Nothing fitting throws verbs_error("choose_gid", ENOENT) listing the whole table.
// Callers that know better pass their own index and never call this.
#include <rdmakit/backend.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/types.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

inline const char* gid_type_name(gid_type t) noexcept {
  switch (t) {
    case gid_type::ib: return "IB";
    case gid_type::roce_v1: return "RoCEv1";
    case gid_type::roce_v2: return "RoCEv2";
  }
  return "unknown";
}

/// One line per GID table entry ("  [1] 0000:...:ffff:0a00:0001 RoCEv2 (IPv4-mapped)"),
/// runs of empty entries folded into one line ("  [2..1023] (empty)"), for error messages.
/// Not a template: a program with two backends compiles this text formatting once.
std::string describe_gid_entries(const std::vector<gid_entry>& table);

/// The GID table of `port` as describe_gid_entries writes it.
template <verbs_backend B>
std::string describe_gid_table(typename B::context ctx, std::uint8_t port, const port_attr& pa) {
  std::vector<gid_entry> table;
  table.reserve(pa.gid_tbl_len);
  for (std::uint32_t i = 0; i < pa.gid_tbl_len; ++i) table.push_back(B::query_gid(ctx, port, static_cast<int>(i)));
  return describe_gid_entries(table);
}

/// The verbs_error of a port without a usable GID: what is wrong, the table, what to do.
[[noreturn]] void throw_no_usable_gid(const std::string& device, std::uint8_t port, link_layer layer,
                                      const char* why, const std::string& table);

/// The GID index to use on `port` by the rule above.
template <verbs_backend B>
int choose_gid(typename B::context ctx, std::uint8_t port) {
  const port_attr pa = B::query_port(ctx, port);
  const auto fail = [&](const char* why) -> int {
    throw_no_usable_gid(B::device_name(ctx), port, pa.layer, why, describe_gid_table<B>(ctx, port, pa));
  };

  if (pa.layer != link_layer::ethernet) {
    if (pa.gid_tbl_len == 0 || !B::query_gid(ctx, port, 0).valid)
      return fail("InfiniBand uses GID index 0, which is empty");
    return 0;
  }

  int routable_v2 = -1;
  int any_v2 = -1;
  int any_v1 = -1;
  // An address vector's sgid_index has 8 bits: a GID past 255 (rxe's table has 1024
  // entries) cannot be sent from.
  const std::uint32_t usable = pa.gid_tbl_len < 256 ? pa.gid_tbl_len : 256;
  for (std::uint32_t i = 0; i < usable; ++i) {
    const gid_entry e = B::query_gid(ctx, port, static_cast<int>(i));
    if (!e.valid) continue;
    if (e.type == gid_type::roce_v2) {
      if (e.value.is_ipv4_mapped()) return static_cast<int>(i);
      if (routable_v2 < 0 && !e.value.is_link_local()) routable_v2 = static_cast<int>(i);
      if (any_v2 < 0) any_v2 = static_cast<int>(i);
    } else if (e.type == gid_type::roce_v1 && any_v1 < 0) {
      any_v1 = static_cast<int>(i);
    }
  }
  if (routable_v2 >= 0) return routable_v2;
  if (any_v2 >= 0) return any_v2;
  if (any_v1 >= 0) return any_v1;
  return fail(usable < pa.gid_tbl_len
                  ? "RoCE needs a RoCEv2 (preferably IPv4-mapped) or RoCEv1 GID and there is none at index 0..255 "
                    "(one past index 255 cannot be sent from: an address vector's sgid_index has 8 bits)"
                  : "RoCE needs a RoCEv2 (preferably IPv4-mapped) or RoCEv1 GID and there is none");
}

}  // namespace detail
RDMAKIT_END_NAMESPACE

#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#include <rdmakit/detail/gid_choice_impl.hpp>
#endif
