#include <cases.hpp>

// A WR prepared on a signal_all queue pair is built signaled and posted without a flag
// write there; a queue pair that decides its signals per post must not post it.
void f() {
  auto& all = connected<rc>();
  auto w = all.prepare(op::write{region().local(), region().remote()}, 1);
  (void)all.post(w);
#ifndef RDMAKIT_CF_CONTROL
  (void)connected<rc, signal_every<4>>().post(w);
#endif
}
