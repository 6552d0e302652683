#pragma once
// The instantiated configurations: the command line picks one of
//   transport {rc, uc, ud} × signaling {signal_all, signal_every<16>, signal_every<64>,
//   signal_manual} × polling {busy_poll<16>, event_driven<16>}
// for the backend of the run, plus the --use_srq ones (on_srq<transport>, see srq_signaling). Each is a runner<B, T, S, P> (perf.hpp); compiled_in()
// says which of them this build has.
#include "perf.hpp"

#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace rdmakit_perf {

#ifndef RDMAKIT_PERF_DISPATCH_TESTED
#define RDMAKIT_PERF_DISPATCH_TESTED 0
#endif

/// Whether runner<B, T, S, P> is compiled into this build. A full build (the default)
/// has all 24 per backend. `-Dperf_dispatch=tested` (CI's sanitizer builds, where each
/// runner costs ~25 s of compiler time) keeps only the ones the tool tests run: RC with
/// every signaling policy, UC signal_every<16> busy and event-driven, UD signal_every<64>
/// event-driven.
/// --use_srq (transport on_srq<X>) has its own few runners: the send tests' defaults
/// (signal_every<16> for send_lat, signal_every<64> for send_bw) with busy polling; a
/// tested build leaves out UC.
template <transport T, signaling S>
constexpr bool srq_signaling() {
  return std::is_same_v<S, signal_every<16>> || std::is_same_v<S, signal_every<64>>;
}

template <transport T, signaling S, polling P>
constexpr bool compiled_in() {
  if constexpr (rdmakit::detail::shares_receives<T>) {
    return srq_signaling<T, S>() && !P::needs_channel && (!RDMAKIT_PERF_DISPATCH_TESTED || T::type != qp_type::uc);
  } else if constexpr (!RDMAKIT_PERF_DISPATCH_TESTED) {
    return true;
  } else if constexpr (T::type == qp_type::rc) {
    return !P::needs_channel;
  } else if constexpr (T::type == qp_type::uc) {
    return std::is_same_v<S, signal_every<16>>;
  } else {
    return std::is_same_v<S, signal_every<64>> && P::needs_channel;
  }
}

/// A backend rdmakit-perf uses only for -R (backends::rdmacm; the mock runs -R on its
/// full set of runners).
template <class B>
constexpr bool cm_only() {
  return B::name == std::string_view("rdmacm");
}

/// -R on librdmacm (backends::rdmacm) has its own few runners: RC, busy polling, -Q 1,
/// 16 or 64 (each runner costs ~25 s of compiler time, and -R is for interoperability).
template <verbs_backend B, transport T, signaling S, polling P>
constexpr bool backend_compiled_in() {
  if constexpr (cm_only<B>()) {
    return T::type == qp_type::rc && !rdmakit::detail::shares_receives<T> && !P::needs_channel &&
           !std::is_same_v<S, signal_manual>;
  }
  return compiled_in<T, S, P>();
}

template <verbs_backend B, transport T, signaling S, polling P>
run_report run_runner(const perf_options& o, peer_link& link, device<B> dev) {
  if constexpr (cm_only<B>() && !backend_compiled_in<B, T, S, P>()) {
    (void)o;
    (void)link;
    (void)dev;
    throw perf_failure("-R runs RC with busy polling and -Q 1, 16 or 64 (it has " + std::string(T::name) + " / " +
                       signaling_name<S>() + " / " + polling_name<P>() + "): " + (P::needs_channel ? "drop -e, " : "") +
                       (T::type != qp_type::rc ? "drop -c, " : "") + "give -Q 1, 16 or 64");
  } else if constexpr (compiled_in<T, S, P>()) {
    return runner<B, T, S, P>(o, link, std::move(dev)).run();
  } else if constexpr (rdmakit::detail::shares_receives<T>) {
    (void)o;
    (void)link;
    (void)dev;
    if constexpr (srq_signaling<T, S>() && !P::needs_channel)
      throw perf_failure("this rdmakit-perf was built with -Dperf_dispatch=tested and has no " + std::string(T::name) +
                         " --use_srq runner: rebuild with -Dperf_dispatch=full (the default)");
    throw perf_failure("--use_srq runs with busy polling and -Q 16 or 64 only (it has " + signaling_name<S>() + " / " +
                       polling_name<P>() + "): " + (P::needs_channel ? "drop -e, " : "") + "give -Q 16 or -Q 64");
  } else {
    (void)o;
    (void)link;
    (void)dev;
    throw perf_failure(std::string("this rdmakit-perf was built with -Dperf_dispatch=tested and has no ") + std::string(T::name) +
                       " / " + signaling_name<S>() + " / " + polling_name<P>() + " runner: rebuild with -Dperf_dispatch=full (the default)");
  }
}

template <verbs_backend B, transport T, signaling S>
run_report run_with_polling(const perf_options& o, peer_link& link, device<B> dev) {
  if (o.events) return run_runner<B, T, S, event_driven<16, 16>>(o, link, std::move(dev));
  return run_runner<B, T, S, busy_poll<16>>(o, link, std::move(dev));
}

template <verbs_backend B, transport T>
run_report run_with_signaling(const perf_options& o, peer_link& link, device<B> dev) {
  switch (o.signal) {
    case signal_choice::all: return run_with_polling<B, T, signal_all>(o, link, std::move(dev));
    case signal_choice::every16: return run_with_polling<B, T, signal_every<16>>(o, link, std::move(dev));
    case signal_choice::every64: return run_with_polling<B, T, signal_every<64>>(o, link, std::move(dev));
    case signal_choice::manual: return run_with_polling<B, T, signal_manual>(o, link, std::move(dev));
  }
  throw perf_failure("unknown signaling choice");
}

/// Runs one side of the test the options describe on backend B, on `dev` when it is
/// open (the mock loopback opens its devices from its own fabric), else on the device
/// named by o.device.
template <verbs_backend B>
run_report run_config(const perf_options& o, peer_link& link, device<B> dev) {
  if (o.use_srq) {
    switch (o.transport) {
      case qp_type::rc: return run_with_signaling<B, on_srq<rc>>(o, link, std::move(dev));
      case qp_type::uc: return run_with_signaling<B, on_srq<uc>>(o, link, std::move(dev));
      case qp_type::ud: return run_with_signaling<B, on_srq<ud>>(o, link, std::move(dev));
    }
  }
  switch (o.transport) {
    case qp_type::rc: return run_with_signaling<B, rc>(o, link, std::move(dev));
    case qp_type::uc: return run_with_signaling<B, uc>(o, link, std::move(dev));
    case qp_type::ud: return run_with_signaling<B, ud>(o, link, std::move(dev));
  }
  throw perf_failure("unknown transport");
}

/// Runs one side of the test the options describe on backend B, on the device named
/// by o.device.
template <verbs_backend B>
run_report run_config(const perf_options& o, peer_link& link) {
  return run_config<B>(o, link, device<B>{});
}

// ---- output --------------------------------------------------------------------------

inline const char* dashes() {
  return "---------------------------------------------------------------------------------------";
}

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      out += b;
    } else {
      out += c;
    }
  }
  return out;
}

/// perftest's table (stdout), or the same numbers as one JSON object with --json.
inline void print_report(const run_report& r, const perf_options& o, const char* backend, const char* role) {
  const test_desc& t = describe(o.test);
  if (o.json) {
    std::printf("{\"tool\":\"rdmakit-perf\",\"test\":\"%s\",\"role\":\"%s\",\"backend\":\"%s\",\"device\":\"%s\",", t.name,
                role, backend, json_escape(r.device).c_str());
    std::printf("\"config\":{\"transport\":\"%s\",\"signaling\":\"%s\",\"polling\":\"%s\",\"post_list\":%u,"
                "\"inline_size\":%u,\"qps\":%u,\"tx_depth\":%u,\"cq_mod\":%u,\"events\":%s},",
                r.transport.c_str(), r.signaling.c_str(), r.polling.c_str(), r.post_list, r.inline_size, r.qps,
                r.tx_depth, r.cq_mod, o.events ? "true" : "false");
    if (r.bw)
      std::printf("\"results\":[{\"bytes\":%u,\"iterations\":%llu,\"bw_peak_mb_per_sec\":%.2f,"
                  "\"bw_average_mb_per_sec\":%.2f,\"msg_rate_mpps\":%.6f,\"seconds\":%.6f}]",
                  r.bw->bytes, static_cast<unsigned long long>(r.bw->iters), r.bw->peak_mb, r.bw->avg_mb,
                  r.bw->mpps, r.bw->seconds);
    else if (r.lat)
      std::printf("\"results\":[{\"bytes\":%u,\"iterations\":%llu,\"t_min_usec\":%.3f,\"t_max_usec\":%.3f,"
                  "\"t_typical_usec\":%.3f,\"t_avg_usec\":%.3f,\"t_stdev_usec\":%.3f,\"p99_usec\":%.3f,"
                  "\"p99_9_usec\":%.3f}]",
                  r.lat->bytes, static_cast<unsigned long long>(r.lat->iters), r.lat->t_min, r.lat->t_max,
                  r.lat->t_typical, r.lat->t_avg, r.lat->t_stdev, r.lat->p99, r.lat->p999);
    else
      std::printf("\"results\":[]");
    if (!r.note.empty()) std::printf(",\"note\":\"%s\"", json_escape(r.note).c_str());
    std::printf("}\n");
    std::fflush(stdout);
    return;
  }
  std::printf("%s\n", dashes());
  std::printf(" rdmakit-perf %s (%s, %s side, device %s, peer %s)\n", t.name, backend, role, r.device.c_str(),
              r.peer.c_str());
  std::printf(" %s\n", r.config_line().c_str());
  std::printf(" inline %u B / %u QP%s / tx depth %u / cq moderation %u%s\n", r.inline_size, r.qps,
              r.qps > 1 ? "s" : "", r.tx_depth, r.cq_mod, o.events ? " / events" : "");
  std::printf("%s\n", dashes());
  if (r.bw) {
    std::printf(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n");
    std::printf(" %-10u %-14llu %-18.2f %-20.2f %.6f\n", r.bw->bytes, static_cast<unsigned long long>(r.bw->iters),
                r.bw->peak_mb, r.bw->avg_mb, r.bw->mpps);
  } else if (r.lat) {
    std::printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
                "t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]\n");
    std::printf(" %-6u %-14llu %-14.2f %-12.2f %-16.2f %-14.2f %-15.2f %-22.2f %.2f\n", r.lat->bytes,
                static_cast<unsigned long long>(r.lat->iters), r.lat->t_min, r.lat->t_max, r.lat->t_typical,
                r.lat->t_avg, r.lat->t_stdev, r.lat->p99, r.lat->p999);
  }
  if (!r.note.empty()) std::printf(" %s\n", r.note.c_str());
  std::printf("%s\n", dashes());
  std::fflush(stdout);
}

}  // namespace rdmakit_perf
