#pragma once
// The error type of the out-of-band endpoint exchange (connection.hpp). It lives in its
// own header so the socket layer (detail/tcp.hpp) can throw it too.
#include <rdmakit/config.hpp>

#include <string>
#include <system_error>

RDMAKIT_BEGIN_NAMESPACE

/// Why an endpoint exchange failed. Compare with `e.code() == exchange_errc::timeout`.
enum class exchange_errc {
  timeout = 1,         ///< the peer did not connect, answer or accept data in time
  connection_refused,  ///< nobody listens at host:port
  connection_closed,   ///< the peer closed the connection early (a truncated record)
  malformed,           ///< the peer's record is not valid in the chosen wire format
  too_large,           ///< the peer announced or sent more than a record may hold
  version_mismatch,    ///< the peer speaks another version of the rdmakit wire format
  wrong_format,        ///< the peer speaks the other wire format (rdmakit vs ibv_*_pingpong)
  invalid_argument,    ///< an argument is unusable (an endpoint the format cannot carry, a timeout, a
                       ///< peer's region used for rights it does not grant)
  address,             ///< the host name or port could not be resolved, bound or listened on
  system,              ///< another socket error (see the message for the call and errno)
};

namespace detail {
class exchange_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rdmakit.exchange"; }
  std::string message(int e) const override {
    switch (static_cast<exchange_errc>(e)) {
      case exchange_errc::timeout: return "timed out";
      case exchange_errc::connection_refused: return "connection refused";
      case exchange_errc::connection_closed: return "connection closed by the peer";
      case exchange_errc::malformed: return "malformed record";
      case exchange_errc::too_large: return "record too large";
      case exchange_errc::version_mismatch: return "wire format version mismatch";
      case exchange_errc::wrong_format: return "peer speaks another wire format";
      case exchange_errc::invalid_argument: return "invalid argument";
      case exchange_errc::address: return "address error";
      case exchange_errc::system: return "socket error";
    }
    return "unknown exchange error";
  }
};
}  // namespace detail

inline const std::error_category& exchange_category() noexcept {
  static const detail::exchange_category_impl c;
  return c;
}
inline std::error_code make_error_code(exchange_errc e) noexcept {
  return {static_cast<int>(e), exchange_category()};
}

/// Thrown by the endpoint exchange. `code()` says what kind of failure (exchange_errc),
/// what() says what was wrong and what to do; `sys_errno()` keeps the socket errno, if any.
class exchange_error : public std::system_error {
 public:
  exchange_error(exchange_errc kind, const std::string& what, int sys_errno = 0)
      : std::system_error(make_error_code(kind), what), errno_(sys_errno) {}
  exchange_errc kind() const noexcept { return static_cast<exchange_errc>(code().value()); }
  int sys_errno() const noexcept { return errno_; }

 private:
  int errno_ = 0;
};

RDMAKIT_END_NAMESPACE

template <>
struct std::is_error_code_enum<rdmakit::exchange_errc> : std::true_type {};
