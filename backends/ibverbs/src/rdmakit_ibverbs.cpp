// The ibverbs backend's setup verbs compiled once, for RDMAKIT_SEPARATE_COMPILATION
// builds (meson: rdmakit_ibverbs_separate_dep).
#include <rdmakit/backends/ibverbs/src.hpp>
