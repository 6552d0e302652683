// With RDMAKIT_SEPARATE_COMPILATION (added by the test), a header of definitions that
// the src.hpp headers compile once, included by another translation unit: it linked
// into "multiple definition" errors, naming no header (an audit). The header stops the
// compilation with one diagnostic naming the fix. The control (-DRDMAKIT_CF_CONTROL,
// without the define: header-only) is in compile_fail_controls.
#include <rdmakit/detail/error_impl.hpp>

int main() {}
