#pragma once
/// The cold code every program instantiates for its backend, whatever its transports
/// and policies: a CQ's and a queue pair's bookkeeping (attach, retire, detach, the
/// departed records), the GID choice. In separate compilation
/// (RDMAKIT_SEPARATE_COMPILATION) each shipped backend's public header declares these
/// instantiations `extern` and its src.hpp defines them, so no user translation unit
/// compiles them (issue 12: about half of the code a small program made per backend).
/// The declarations are made by whichever of the two comes second in a translation unit,
/// detail/qp_setup.hpp (where the last of these templates is defined) or the backend's
/// header, and not where the definitions are (RDMAKIT_COMPILING_SOURCES: a declaration
/// after the definition is an error). A backend of one's own may do the same
/// (`RDMAKIT_BACKEND_INSTANCES(extern, B)` after both, `RDMAKIT_BACKEND_INSTANCES(, B)` in
/// one translation unit), or not: without the declarations every translation unit
/// instantiates them, as in header-only builds.
#include <rdmakit/config.hpp>

// At global scope, with `EXTERN` empty (the definitions) or `extern` (the declarations).
// `B` is one macro argument: a backend whose name holds a comma takes an alias first.
#define RDMAKIT_BACKEND_INSTANCES(EXTERN, B)                                                                      \
  EXTERN template struct rdmakit::detail::cq_block<B>;                                                           \
  EXTERN template struct rdmakit::detail::qp_parts<B>;                                                           \
  EXTERN template void rdmakit::detail::post_drain_marker<B>(rdmakit::detail::qp_link<B>&) noexcept;              \
  EXTERN template void rdmakit::detail::check_cq_contexts<B>(                                                    \
      const rdmakit::detail::pd_state<B>&, const rdmakit::detail::cq_block<B>&, const rdmakit::detail::cq_block<B>&); \
  EXTERN template void rdmakit::detail::retire<B>(rdmakit::detail::qp_parts<B>&, bool, bool);                     \
  EXTERN template void rdmakit::detail::prune_retired<B>(                                                        \
      rdmakit::detail::unique_owner<rdmakit::detail::qp_parts<B>>&) noexcept;                                    \
  EXTERN template bool rdmakit::detail::replacement_fits<B>(const rdmakit::detail::qp_parts<B>&) noexcept;        \
  EXTERN template std::string rdmakit::detail::describe_gid_table<B>(B::context, std::uint8_t,          \
                                                                     const rdmakit::port_attr&);                  \
  EXTERN template int rdmakit::detail::choose_gid<B>(B::context, std::uint8_t)
