#include <cases.hpp>

void f() {
  auto b = connected<uc>().make_batch<4>(); b.write(region().local(), region().remote(), 1);
#ifndef RDMAKIT_CF_CONTROL
  b.read(region().local(), region().remote(), 2);
#endif
}
