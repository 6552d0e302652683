#include <cases.hpp>

#include <rdmakit/memory_window.hpp>

// SEND_WITH_INV has opcodes on RC only: none on UC (nor UD).
using BW = rdmakit::archetype_mw_backend;
queue_pair<BW, rc, signal_all, qp_state::rts>& inv_rc();
queue_pair<BW, uc, signal_all, qp_state::rts>& inv_uc();
memory_region<BW, all_rights>& inv_region();
remote_region<access::remote_write>& their_window();

void f() {
  (void)inv_rc().post(op::send_inv{inv_region().local(), their_window()}, 1);
#ifndef RDMAKIT_CF_CONTROL
  (void)inv_uc().post(op::send_inv{inv_region().local(), their_window()}, 2);
#endif
}
