// Entry point of conformance_ibverbs: runs on the device named by RDMAKIT_DEVICE
// (GID index RDMAKIT_GID_INDEX, else the one rdmakit chooses); without one, skips everything.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const char* dev = std::getenv("RDMAKIT_DEVICE");
  if (dev == nullptr || *dev == '\0') {
    std::puts("conformance_ibverbs: RDMAKIT_DEVICE is not set; skipped every scenario");
    return 0;
  }
  std::printf("conformance_ibverbs: device %s, GID index %s\n", dev,
              std::getenv("RDMAKIT_GID_INDEX") ? std::getenv("RDMAKIT_GID_INDEX") : "rdmakit's choice");
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
