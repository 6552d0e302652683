#pragma once
// device.hpp's name check and its errors: inline in header-only builds, compiled once
// (<rdmakit/src.hpp>) with RDMAKIT_SEPARATE_COMPILATION.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/device.hpp>
#include <rdmakit/error.hpp>

#include <cerrno>
#include <string>
#include <string_view>
#include <vector>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

RDMAKIT_DECL void check_device_name(const std::vector<std::string>& all, std::string_view name,
                                    std::string_view backend) {
  if (all.empty())
    throw verbs_error("ibv_open_device", ENODEV,
                      cat("no RDMA device found by the ", backend,
                          " backend: load a driver (e.g. `rdma link add rxe0 type rxe netdev eth0`) "
                          "or test with the mock backend"));
  if (name.empty()) return;
  for (const auto& n : all)
    if (n == name) return;
  std::string list;
  for (const auto& n : all) append(list, list.empty() ? "" : ", ", n);
  throw verbs_error("ibv_open_device", ENODEV, cat("no device named \"", name, "\"; available: ", list));
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
