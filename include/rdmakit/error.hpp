#pragma once
/// Errors: setup verbs throw `verbs_error` (verb name + errno as std::error_code);
/// the data path returns statuses. `wc_status` converts to std::error_code too.
#include <rdmakit/detail/text.hpp>
#include <rdmakit/types.hpp>

#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

RDMAKIT_BEGIN_NAMESPACE

namespace detail {
inline const char* errno_name(int e) noexcept {
  switch (e) {
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EBUSY: return "EBUSY";
    case ENODEV: return "ENODEV";
    case ENOENT: return "ENOENT";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case EAGAIN: return "EAGAIN";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EFAULT: return "EFAULT";
    case ENOSPC: return "ENOSPC";
    case EPROTO: return "EPROTO";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case EIO: return "EIO";
    case ERANGE: return "ERANGE";
    case ENODATA: return "ENODATA";
    default: return "errno";
  }
}

/// "Invalid argument (EINVAL)": strerror and the errno's name.
std::string errno_message(int e);

// The categories' members stay in the class: a virtual function defined later, even
// inline, would make GCC emit the vtable in every translation unit.
class verbs_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rdmakit.verbs"; }
  std::string message(int e) const override { return errno_message(e); }
  // errno values compare equal to std::errc, so `ec == std::errc::invalid_argument` works.
  std::error_condition default_error_condition(int e) const noexcept override {
    return std::generic_category().default_error_condition(e);
  }
};

class wc_status_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rdmakit.wc_status"; }
  std::string message(int e) const override { return to_string(static_cast<wc_status>(e)); }
};
}  // namespace detail

/// Category of errno values returned by verbs.
inline const std::error_category& verbs_category() noexcept {
  static const detail::verbs_category_impl c;
  return c;
}
/// Category of work completion statuses.
inline const std::error_category& wc_status_category() noexcept {
  static const detail::wc_status_category_impl c;
  return c;
}

/// An errno from a verb as a std::error_code of verbs_category().
inline std::error_code make_verbs_error_code(int err) noexcept { return {err, verbs_category()}; }
/// A completion status as a std::error_code of wc_status_category().
inline std::error_code make_error_code(wc_status s) noexcept {
  return {static_cast<int>(s), wc_status_category()};
}

/// What a failed QP transition was: the QP, the step, the mask given, and the bits the
/// IB transition table says are missing or not allowed (detail/qp_transitions.hpp).
struct qp_transition_failure {
  /// The queue pair's number.
  std::uint32_t qp_num = 0;
  /// The state it was in.
  qp_state from = qp_state::reset;
  /// The state it was asked to reach.
  qp_state to = qp_state::reset;
  /// The attribute mask that was passed.
  qp_attr_mask mask = qp_attr_mask::none;
  /// Bits the transition requires and the mask lacked.
  qp_attr_mask missing = qp_attr_mask::none;
  /// Bits the mask had that the transition does not allow.
  qp_attr_mask extra = qp_attr_mask::none;
};

/// Thrown by setup operations. `verb()` names the failing call ("ibv_modify_qp"),
/// `code()` carries the errno, and what() adds what was wrong and what to do.
class verbs_error : public std::system_error {
 public:
  /// `verb` failed with errno `err`; `detail` says what was wrong and what to do.
  verbs_error(std::string_view verb, int err, std::string_view detail = {});
  /// The same, for a failed QP transition: `t` says which bits were missing or extra.
  verbs_error(std::string_view verb, int err, std::string_view detail, const qp_transition_failure& t);
  /// The failed transition, for errors of ibv_modify_qp raised by a queue pair.
  const qp_transition_failure* transition() const noexcept { return has_transition_ ? &transition_ : nullptr; }
  /// The call that failed, e.g. "ibv_modify_qp".
  const std::string& verb() const noexcept { return verb_; }
  /// The errno the verb returned (also code().value()).
  int errno_value() const noexcept { return code().value(); }
  /// What was wrong and what to do, without the verb and errno that what() adds.
  const std::string& detail() const noexcept { return detail_; }

 private:
  static std::string compose(std::string_view verb, std::string_view detail);
  std::string verb_;
  std::string detail_;
  qp_transition_failure transition_{};
  bool has_transition_ = false;
};

/// Thrown when rdmakit refuses a call itself, before any verb: an empty handle (moved
/// from or default-constructed), or options that cannot work. No device state changed.
class usage_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// Thrown by allocate() when there is no memory for its buffer: a std::bad_alloc (code
/// that handles running out of memory catches it as such) whose what() names the call,
/// the size and what to do.
class allocation_error : public std::bad_alloc {
 public:
  /// `what`: the call, the size and what to do.
  explicit allocation_error(const std::string& what) : what_(what) {}
  /// The message given at construction.
  const char* what() const noexcept override { return what_.what(); }

 private:
  std::runtime_error what_;  // its copies share the text and do not throw, as an exception's must not
};

namespace detail {
/// "queue_pair::post_recv(): this queue_pair is empty (moved from or default-constructed) ..."
[[noreturn]] void throw_empty(const char* type, const char* call);
/// "create_qp: send CQ: the completion_queue given is empty ...": an argument of `call`.
[[noreturn]] void throw_empty_argument(const char* type, const char* call);
/// "create_qp(): another thread is waiting on this completion queue ...": a setup call
/// that would change a CQ another thread waits on (cq_block::waiter).
[[noreturn]] void throw_waited_on(const char* call);
/// The same from a queue pair's destructor, which cannot throw: says so on stderr and
/// ends the program.
[[noreturn]] void abort_waited_on(std::uint32_t qp_num) noexcept;
/// "memory_region::local(4000, 200): the range runs past the region's 4096 bytes ...":
/// a buffer cut from `what` (`size` bytes) is never shortened, so a WR carries the
/// length its caller gave or is not built.
[[noreturn]] void throw_range(const char* call, const char* what, std::uint64_t offset, std::uint64_t len,
                              std::uint64_t size);
/// "remote_region::unchecked: 64 bytes at 0xfffffffffffffff0 run past the end of the
/// address space ...": a remote range no registration covers.
[[noreturn]] void throw_wrapping_region(const char* call, std::uint64_t addr, std::uint64_t length);
}  // namespace detail

RDMAKIT_END_NAMESPACE

template <>
struct std::is_error_code_enum<rdmakit::wc_status> : std::true_type {};

#if !defined(RDMAKIT_SEPARATE_COMPILATION)
#include <rdmakit/detail/error_impl.hpp>
#endif
