// Entry point of test_cm_rdmacm: the connection manager scenarios on the device named
// by RDMAKIT_DEVICE (rxe0 in the guest: tests/rxe runs it); without one, skips them all.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const char* dev = std::getenv("RDMAKIT_DEVICE");
  if (dev == nullptr || *dev == '\0') {
    std::puts("test_cm_rdmacm: RDMAKIT_DEVICE is not set; skipped every scenario");
    return 0;
  }
  std::printf("test_cm_rdmacm: device %s\n", dev);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
