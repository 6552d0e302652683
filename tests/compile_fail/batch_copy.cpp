#include <cases.hpp>

void f() {
  auto b = connected<uc>().make_batch<4>();
  b.write(region().local(), region().remote(), 1);
#ifndef RDMAKIT_CF_CONTROL
  auto copy = b;  // its WRs would point at b's SGEs
  (void)copy;
#endif
}
