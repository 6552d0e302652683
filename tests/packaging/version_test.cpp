// The version macros of <rdmakit/config.hpp> agree with meson.build's project version
// (passed as the argument): the string, and MAJOR.MINOR.PATCH read back from it.
#include <rdmakit/config.hpp>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <meson.project_version()>\n", argv[0]);
    return 2;
  }
  char from_numbers[64];
  std::snprintf(from_numbers, sizeof from_numbers, "%d.%d.%d", RDMAKIT_VERSION_MAJOR, RDMAKIT_VERSION_MINOR,
                RDMAKIT_VERSION_PATCH);
  const bool string_ok = std::strcmp(RDMAKIT_VERSION_STRING, argv[1]) == 0;
  const bool numbers_ok = std::strcmp(from_numbers, argv[1]) == 0;
  const bool packed_ok =
      RDMAKIT_VERSION == RDMAKIT_VERSION_MAJOR * 10000 + RDMAKIT_VERSION_MINOR * 100 + RDMAKIT_VERSION_PATCH;
  std::printf("meson.build: %s; RDMAKIT_VERSION_STRING: %s; MAJOR.MINOR.PATCH: %s; RDMAKIT_VERSION: %d\n", argv[1],
              RDMAKIT_VERSION_STRING, from_numbers, RDMAKIT_VERSION);
  if (!string_ok || !numbers_ok || !packed_ok) {
    std::fprintf(stderr, "version mismatch: update include/rdmakit/config.hpp to the project version\n");
    return 1;
  }
  return 0;
}
