#include <cases.hpp>

void f() {
#ifndef RDMAKIT_CF_CONTROL
  auto mr = pd().allocate<rdmakit::access::remote_write>(64);
#else
  auto mr = pd().allocate<rdmakit::access::local_write | rdmakit::access::remote_write>(64);
#endif
  (void)mr;
}
