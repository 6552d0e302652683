#include <cases.hpp>

// Memory windows are bound on RC or UC queue pairs only.
using BW = rdmakit::archetype_mw_backend;
memory_region<BW, all_rights | access::mw_bind>& bindable();
queue_pair<BW, rc, signal_all, qp_state::rts>& bw_rc();
queue_pair<BW, ud, signal_all, qp_state::rts>& bw_ud();
memory_window<BW, access::remote_read>& read_window();

void f() {
  (void)read_window().bind(bw_rc(), bindable(), 0, 64, 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)read_window().bind(bw_ud(), bindable(), 0, 64, 1);
#endif
}
