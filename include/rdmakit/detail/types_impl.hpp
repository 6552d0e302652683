#pragma once
// The definitions of types.hpp's text conversions: inline in header-only builds, compiled
// once (<rdmakit/src.hpp>) with RDMAKIT_SEPARATE_COMPILATION.
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/detail/text.hpp>
#include <rdmakit/types.hpp>

#include <cstdio>

RDMAKIT_BEGIN_NAMESPACE

RDMAKIT_DECL const char* to_string(wc_status s) noexcept {
  switch (s) {
    case wc_status::success: return "success";
    case wc_status::loc_len_err: return "local length error";
    case wc_status::loc_qp_op_err: return "local QP operation error";
    case wc_status::loc_eec_op_err: return "local EE context operation error";
    case wc_status::loc_prot_err: return "local protection error";
    case wc_status::wr_flush_err: return "Work Request Flushed Error";
    case wc_status::mw_bind_err: return "memory management operation error";
    case wc_status::bad_resp_err: return "bad response error";
    case wc_status::loc_access_err: return "local access error";
    case wc_status::rem_inv_req_err: return "remote invalid request error";
    case wc_status::rem_access_err: return "remote access error";
    case wc_status::rem_op_err: return "remote operation error";
    case wc_status::retry_exc_err: return "transport retry counter exceeded";
    case wc_status::rnr_retry_exc_err: return "RNR retry counter exceeded";
    case wc_status::loc_rdd_viol_err: return "local RDD violation error";
    case wc_status::rem_inv_rd_req_err: return "remote invalid RD request";
    case wc_status::rem_abort_err: return "aborted error";
    case wc_status::inv_eecn_err: return "invalid EE context number";
    case wc_status::inv_eec_state_err: return "invalid EE context state";
    case wc_status::fatal_err: return "fatal error";
    case wc_status::resp_timeout_err: return "response timeout error";
    case wc_status::general_err: return "general error";
  }
  return "unknown";
}

RDMAKIT_DECL const char* to_string(opcode o) noexcept {
  switch (o) {
    case opcode::rdma_write: return "RDMA_WRITE";
    case opcode::rdma_write_with_imm: return "RDMA_WRITE_WITH_IMM";
    case opcode::send: return "SEND";
    case opcode::send_with_imm: return "SEND_WITH_IMM";
    case opcode::rdma_read: return "RDMA_READ";
    case opcode::atomic_cmp_and_swp: return "ATOMIC_CMP_AND_SWP";
    case opcode::atomic_fetch_and_add: return "ATOMIC_FETCH_AND_ADD";
    case opcode::local_inv: return "LOCAL_INV";
    case opcode::bind_mw: return "BIND_MW";
    case opcode::send_with_inv: return "SEND_WITH_INV";
  }
  return "UNKNOWN";
}

RDMAKIT_DECL const char* to_string(wc_opcode o) noexcept {
  switch (o) {
    case wc_opcode::send: return "SEND";
    case wc_opcode::rdma_write: return "RDMA_WRITE";
    case wc_opcode::rdma_read: return "RDMA_READ";
    case wc_opcode::comp_swap: return "COMP_SWAP";
    case wc_opcode::fetch_add: return "FETCH_ADD";
    case wc_opcode::bind_mw: return "BIND_MW";
    case wc_opcode::local_inv: return "LOCAL_INV";
    case wc_opcode::recv: return "RECV";
    case wc_opcode::recv_rdma_with_imm: return "RECV_RDMA_WITH_IMM";
  }
  return "UNKNOWN";
}

RDMAKIT_DECL const char* to_string(qp_state s) noexcept {
  switch (s) {
    case qp_state::reset: return "RESET";
    case qp_state::init: return "INIT";
    case qp_state::rtr: return "RTR";
    case qp_state::rts: return "RTS";
    case qp_state::sqd: return "SQD";
    case qp_state::sqe: return "SQE";
    case qp_state::err: return "ERR";
  }
  return "UNKNOWN";
}

RDMAKIT_DECL const char* to_string(qp_type t) noexcept {
  switch (t) {
    case qp_type::rc: return "RC";
    case qp_type::uc: return "UC";
    case qp_type::ud: return "UD";
  }
  return "UNKNOWN";
}

RDMAKIT_DECL const char* to_string(async_event_type t) noexcept {
  static constexpr const char* names[] = {
      "CQ_ERR",      "QP_FATAL",    "QP_REQ_ERR",  "QP_ACCESS_ERR",       "COMM_EST",
      "SQ_DRAINED",  "PATH_MIG",    "PATH_MIG_ERR", "DEVICE_FATAL",       "PORT_ACTIVE",
      "PORT_ERR",    "LID_CHANGE",  "PKEY_CHANGE", "SM_CHANGE",           "SRQ_ERR",
      "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED", "CLIENT_REREGISTER", "GID_CHANGE"};
  auto i = static_cast<std::uint32_t>(t);
  return i < std::size(names) ? names[i] : "UNKNOWN";
}

RDMAKIT_DECL const char* to_string(link_layer l) noexcept {
  switch (l) {
    case link_layer::unspecified: return "unspecified";
    case link_layer::infiniband: return "InfiniBand";
    case link_layer::ethernet: return "Ethernet";
  }
  return "unknown";
}

RDMAKIT_DECL const char* to_string(port_state s) noexcept {
  switch (s) {
    case port_state::nop: return "PORT_NOP";
    case port_state::down: return "PORT_DOWN";
    case port_state::init: return "PORT_INIT";
    case port_state::armed: return "PORT_ARMED";
    case port_state::active: return "PORT_ACTIVE";
    case port_state::active_defer: return "PORT_ACTIVE_DEFER";
  }
  return "unknown";
}

RDMAKIT_DECL std::string to_string(qp_attr_mask m) {
  static constexpr const char* names[] = {
      "STATE",        "CUR_STATE",   "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS",     "PKEY_INDEX",
      "PORT",         "QKEY",        "AV",                  "PATH_MTU",         "TIMEOUT",
      "RETRY_CNT",    "RNR_RETRY",   "RQ_PSN",              "MAX_QP_RD_ATOMIC", "ALT_PATH",
      "MIN_RNR_TIMER", "SQ_PSN",     "MAX_DEST_RD_ATOMIC",  "PATH_MIG_STATE",   "CAP",
      "DEST_QPN"};
  std::string out;
  auto bits = to_underlying(m);
  for (std::uint32_t i = 0; i < 32; ++i) {
    if (!(bits & (1u << i))) continue;
    if (!out.empty()) out += '|';
    if (i < std::size(names)) out += names[i];
    else detail::append(out, "BIT", i);
  }
  return out.empty() ? "none" : out;
}

RDMAKIT_DECL std::string to_string(access a) {
  static constexpr const char* names[] = {"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ",
                                          "REMOTE_ATOMIC", "MW_BIND"};
  std::string out;
  auto bits = to_underlying(a);
  for (std::uint32_t i = 0; i < 32; ++i) {
    if (!(bits & (1u << i))) continue;
    if (!out.empty()) out += '|';
    if (i < std::size(names)) out += names[i];
    else detail::append(out, "BIT", i);
  }
  return out.empty() ? "none" : out;
}

RDMAKIT_DECL std::string gid::to_string() const {
  char buf[40];
  int n = 0;
  for (std::size_t i = 0; i < 16; i += 2)
    n += std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), i ? ":%02x%02x" : "%02x%02x",
                       raw[i], raw[i + 1]);
  return std::string(buf, static_cast<std::size_t>(n));
}

RDMAKIT_DECL bool gid::parse(std::string_view text, gid& out) noexcept {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  // 32 hex digits, or eight groups of four between single colons (39 characters).
  const bool grouped = text.size() == 39;
  if (!grouped && text.size() != 32) return false;
  gid g;
  int nibbles = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (grouped && i % 5 == 4) {
      if (c != ':') return false;
      continue;
    }
    int v = hex(c);
    if (v < 0) return false;
    g.raw[static_cast<std::size_t>(nibbles / 2)] |=
        static_cast<std::uint8_t>(nibbles % 2 ? v : v << 4);
    ++nibbles;
  }
  out = g;
  return true;
}

RDMAKIT_END_NAMESPACE
