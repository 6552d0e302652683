#pragma once
// The text of detail/gid_choice.hpp's errors, not templates: inline in header-only
// builds, compiled once (<rdmakit/src.hpp>) with RDMAKIT_SEPARATE_COMPILATION.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/detail/gid_choice.hpp>
#include <rdmakit/error.hpp>

#include <cerrno>
#include <cstddef>
#include <string>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

RDMAKIT_NOINLINE RDMAKIT_DECL std::string describe_gid_entries(const std::vector<gid_entry>& table) {
  std::string out;
  std::size_t empty_from = 0;
  bool in_empty_run = false;
  const auto close_run = [&](std::size_t end) {  // end: one past the run
    if (!in_empty_run) return;
    append(out, "\n  [", empty_from);
    if (end - empty_from > 1) append(out, "..", end - 1);
    out += "] (empty)";
    in_empty_run = false;
  };
  for (std::size_t i = 0; i < table.size(); ++i) {
    const gid_entry& e = table[i];
    if (!e.valid) {
      if (!in_empty_run) empty_from = i;
      in_empty_run = true;
      continue;
    }
    close_run(i);
    append(out, "\n  [", i, "] ", e.value.to_string(), " ", gid_type_name(e.type));
    if (e.value.is_ipv4_mapped()) out += " (IPv4-mapped)";
    else if (e.value.is_link_local()) out += " (link-local)";
  }
  close_run(table.size());
  if (table.empty()) out += "\n  (the GID table is empty)";
  return out;
}

RDMAKIT_NOINLINE RDMAKIT_DECL void throw_no_usable_gid(const std::string& device, std::uint8_t port,
                                                       link_layer layer, const char* why,
                                                       const std::string& table) {
  throw verbs_error("choose_gid", ENOENT,
                    cat("no usable GID on ", device, " port ", port, " (", to_string(layer),
                        " link layer): ", why, ". GID table:", table,
                        "\nGive the port an IP address (RoCE GIDs are the netdev's addresses; "
                        "see `rdma link` and `ip addr`), or pass a GID index explicitly."));
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
