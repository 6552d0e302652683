#pragma once
// Endpoints with known records, and the error catcher the wire and exchange tests share.
#include <rdmakit/connection.hpp>

#include <string>

namespace rdmakit_test {

using namespace rdmakit;

inline endpoint sample_endpoint() {
  endpoint ep;
  ep.lid = 0x0011;
  ep.qpn = 0x00abcd;
  ep.psn = 0x123456;
  ep.gid = gid::from_ipv4(10, 0, 0, 1);
  ep.mtu = mtu::mtu_2048;
  return ep;
}

inline endpoint other_endpoint() {
  endpoint ep;
  ep.lid = 0;
  ep.qpn = 0xfedcba;
  ep.psn = 0x000001;
  gid::parse("fe80:0000:0000:0000:0202:03ff:fe04:0506", ep.gid);
  ep.mtu = mtu::mtu_1024;
  return ep;
}

inline std::string last_error;  // what() of the last exchange_error caught by error_of

template <class F>
inline exchange_errc error_of(F&& f) {
  last_error.clear();
  try {
    f();
  } catch (const exchange_error& e) {
    last_error = e.what();
    return e.kind();
  }
  return exchange_errc{};
}

}  // namespace rdmakit_test

using namespace rdmakit_test;
