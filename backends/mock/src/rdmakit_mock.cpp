// The mock backend compiled once, for RDMAKIT_SEPARATE_COMPILATION builds
// (meson: rdmakit_mock_separate_dep).
#include <rdmakit/backends/mock/src.hpp>
