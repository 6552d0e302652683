#pragma once
// The bodies of error.hpp's messages and constructors, not templates: inline in
// header-only builds, compiled once (<rdmakit/src.hpp>) with RDMAKIT_SEPARATE_COMPILATION.
#include <rdmakit/error.hpp>

#include <cstring>
#include <string>
#include <system_error>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

RDMAKIT_DECL std::string errno_message(int e) {
  return std::string(std::strerror(e)) + " (" + errno_name(e) + ")";
}

RDMAKIT_NOINLINE RDMAKIT_DECL void throw_empty(const char* type, const char* call) {
  throw usage_error(std::string(type) + "::" + call + "(): this " + type +
                    " is empty (moved from or default-constructed): use the object the move or "
                    "the factory returned");
}

}  // namespace detail

RDMAKIT_DECL verbs_error::verbs_error(std::string verb, int err, const std::string& detail)
    : std::system_error(make_verbs_error_code(err), compose(verb, detail)), verb_(std::move(verb)), detail_(detail) {}

RDMAKIT_DECL verbs_error::verbs_error(std::string verb, int err, const std::string& detail,
                                      const qp_transition_failure& t)
    : verbs_error(std::move(verb), err, detail) {
  transition_ = t;
  has_transition_ = true;
}

RDMAKIT_DECL std::string verbs_error::compose(const std::string& verb, const std::string& detail) {
  return detail.empty() ? verb : verb + ": " + detail;
}

RDMAKIT_END_NAMESPACE
