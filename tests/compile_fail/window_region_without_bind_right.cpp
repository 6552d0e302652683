#include <cases.hpp>

// A region registered without access::mw_bind cannot have a window bound to it.
using BW = rdmakit::archetype_mw_backend;
memory_region<BW, all_rights>& unbindable();
memory_region<BW, all_rights | access::mw_bind>& bindable();
queue_pair<BW, rc, signal_all, qp_state::rts>& bw_connected();
memory_window<BW, access::remote_read>& read_window();

void f() {
  (void)read_window().bind(bw_connected(), bindable(), 0, 64, 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)read_window().bind(bw_connected(), unbindable(), 0, 64, 1);
#endif
}
