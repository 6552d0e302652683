#include <cases.hpp>

// A window granting REMOTE_WRITE cannot be bound to a region registered read-only.
using BW = rdmakit::archetype_mw_backend;
memory_region<BW, access::local_write | access::remote_read | access::mw_bind>& read_only_bindable();
memory_region<BW, all_rights | access::mw_bind>& writable_bindable();
queue_pair<BW, rc, signal_all, qp_state::rts>& bw_connected();
memory_window<BW, access::remote_write>& write_window();

void f() {
  (void)write_window().bind(bw_connected(), writable_bindable(), 0, 64, 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)write_window().bind(bw_connected(), read_only_bindable(), 0, 64, 1);
#endif
}
