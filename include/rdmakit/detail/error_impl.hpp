#pragma once
// The bodies of error.hpp's messages and constructors, not templates: inline in
// header-only builds, compiled once (<rdmakit/src.hpp>) with RDMAKIT_SEPARATE_COMPILATION.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/error.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

RDMAKIT_DECL std::string errno_message(int e) {
  return cat(std::strerror(e), " (", errno_name(e), ")");
}

RDMAKIT_NOINLINE RDMAKIT_DECL void throw_empty_argument(const char* type, const char* call) {
  throw usage_error(cat(call, ": the ", type,
                        " given is empty (moved from or default-constructed): pass the object the move or "
                        "the factory returned"));
}

// The rule throw_waited_on and abort_waited_on name.
inline constexpr const char* one_thread_rule =
    "a completion queue and its queue pairs are used by one thread at a time (docs/ownership-and-threads.md): "
    "create, reset and destroy its queue pairs and set its handlers on the thread that waits on it, or end that "
    "wait first";

RDMAKIT_NOINLINE RDMAKIT_DECL void throw_waited_on(const char* call) {
  throw usage_error(cat(call, ": another thread is waiting on this completion queue (in wait(), wait_for() or "
                              "dispatch_wait()), whose polls read what this call would change; ",
                        one_thread_rule));
}

RDMAKIT_NOINLINE RDMAKIT_DECL void abort_waited_on(std::uint32_t qp_num) noexcept {
  std::fprintf(stderr,
               "rdmakit: queue pair 0x%x destroyed while another thread is waiting on its completion queue (in "
               "wait(), wait_for() or dispatch_wait()), whose polls read what its destruction changes; %s\n",
               qp_num, one_thread_rule);
  std::abort();
}

RDMAKIT_NOINLINE RDMAKIT_DECL void throw_empty(const char* type, const char* call) {
  throw usage_error(cat(type, "::", call, "(): this ", type,
                        " is empty (moved from or default-constructed): use the object the move or "
                        "the factory returned"));
}

RDMAKIT_NOINLINE RDMAKIT_DECL void throw_wrapping_region(const char* call, std::uint64_t addr, std::uint64_t length) {
  throw usage_error(cat(call, ": ", length, " bytes at ", hex(addr),
                        " run past the end of the address space: no registration covers such a range (its "
                        "sub-ranges would wrap to address 0); the descriptor is corrupt or its fields are swapped"));
}

RDMAKIT_NOINLINE RDMAKIT_DECL void throw_range(const char* call, const char* what, std::uint64_t offset,
                                               std::uint64_t len, std::uint64_t size) {
  if (offset > size)
    throw usage_error(cat(call, "(", offset, ", ", len, "): offset ", offset, " is past the end of the ", what, " (",
                          size, " bytes); rdmakit never shortens a buffer, so compute the offset within it"));
  if (len > size - offset)
    throw usage_error(cat(call, "(", offset, ", ", len, "): the range runs past the end of the ", what, " (", size,
                          " bytes): at most ", size - offset, " bytes start at offset ", offset,
                          "; rdmakit never shortens a buffer, so ask for the length the WR should carry"));
  throw usage_error(cat(call, "(", offset, ", ", len, "): a local buffer (one SGE) holds at most 4294967295 bytes, ",
                        "and one WR carries at most 2 GiB: cut the ", what, " into smaller buffers"));
}

}  // namespace detail

RDMAKIT_DECL verbs_error::verbs_error(std::string_view verb, int err, std::string_view detail)
    : std::system_error(make_verbs_error_code(err), compose(verb, detail)), verb_(verb), detail_(detail) {}

RDMAKIT_DECL verbs_error::verbs_error(std::string_view verb, int err, std::string_view detail,
                                      const qp_transition_failure& t)
    : verbs_error(verb, err, detail) {
  transition_ = t;
  has_transition_ = true;
}

RDMAKIT_DECL std::string verbs_error::compose(std::string_view verb, std::string_view why) {
  return why.empty() ? std::string(verb) : detail::cat(verb, ": ", why);
}

RDMAKIT_END_NAMESPACE
