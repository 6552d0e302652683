#pragma once
// The text of completion::status_message: inline in header-only builds, compiled once
// (<rdmakit/src.hpp>) with RDMAKIT_SEPARATE_COMPILATION.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/completion.hpp>

#include <cstdint>
#include <string>

RDMAKIT_BEGIN_NAMESPACE
namespace detail {

RDMAKIT_DECL std::string status_message(wc_status s, bool recv, std::uint64_t wr_id, std::uint32_t qp_num,
                                        bool show_wr_id) {
  std::string text = to_string(s);
  if (s == wc_status::success) return text;
  text += recv ? " on receive" : " on send";
  if (show_wr_id) append(text, " wr_id ", wr_id);
  append(text, " of QP ", hex(qp_num), ": ", explain(s));
  return text;
}

}  // namespace detail
RDMAKIT_END_NAMESPACE
