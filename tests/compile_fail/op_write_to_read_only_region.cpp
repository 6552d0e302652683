#include <cases.hpp>

void f() {
  auto remote = region().remote().narrow<rdmakit::access::remote_read>();
  (void)op::read{region().local(), remote};
#ifndef RDMAKIT_CF_CONTROL
  (void)op::write{region().local(), remote};
#endif
}
