#include <cases.hpp>

void f() {
  auto& q = connected<rc>(); auto ro = region().remote().narrow<rdmakit::access::remote_read>(); (void)q.read(region().local(), ro, 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)q.write(region().local(), ro, 1);
#endif
}
