// The core's non-template definitions compiled once, for RDMAKIT_SEPARATE_COMPILATION
// builds (meson: rdmakit_separate_dep).
#include <rdmakit/src.hpp>
