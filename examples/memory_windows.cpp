// Lending part of a buffer through memory windows: the server binds a window to 1 KiB of
// a region and hands the client only the window's descriptor. The client READs through
// a type 1 window and WRITEs through a type 2 one, then gives the type 2 window back
// itself with a SEND_WITH_INV (op::send_inv): the server's poll of that receive tells the
// window, whose invalidate() then refuses (there is nothing left to revoke). The server
// binds it again, the client WRITEs, and once the server has invalidated it the client's
// next WRITE fails with REM_ACCESS_ERR (the server's region stays registered all along).
// A third window stays bound to the end, and outlives the queue pairs.
// Windows need a region registered with access::mw_bind.
#include "example_backend.hpp"

#include <rdmakit/memory_window.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>

using namespace rdmakit;
using rdmakit_examples::B;

int main(int argc, char** argv) try {
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  auto cpd = devices.first.create_pd();
  auto spd = devices.second.create_pd();
  auto ccq = devices.first.create_cq(64);
  auto scq = devices.second.create_cq(64);
  auto mine = cpd.allocate<access::local_write>(64);
  auto lent = spd.allocate<access::local_write | access::remote_read | access::remote_write | access::mw_bind>(8192);
  // Declared before the queue pairs, so it outlives the one it is bound through, and left
  // bound at the end: the device holds that QP for the window, and the window keeps it
  // until it is freed (a QP destroyed under it stalls rxe's kernel 50 s).
  auto kept = spd.alloc_window<access::remote_read>();
  auto c = cpd.create_qp<rc>(ccq, qp_cap{8, 8});
  auto s = spd.create_qp<rc>(scq, qp_cap{8, 8});
  const endpoint ce = c.local_endpoint();
  auto client = std::move(c).connect(s.local_endpoint());
  auto server = std::move(s).connect(ce);

  // Waits for one completion on `cq` and returns its status.
  auto status_of = [](auto& cq) {
    wc_status st = wc_status::general_err;
    for (int tries = 0; tries < 20; ++tries)
      if (cq.wait([&](const completion<B>& x) { st = x.status(); }, std::chrono::milliseconds{100})) break;
    return st;
  };

  // Type 1, read-only: bound by the verbs call (still a send-queue slot and a completion).
  std::memcpy(lent.data() + 1024, "read me!", 8);
  auto reader = spd.alloc_window<access::remote_read, mw_type::type1>();
  const bool bound1 = reader.bind(server, lent, 1024, 1024, 1).ok() && status_of(scq) == wc_status::success;
  const bool read = client.read(mine.local(0, 8), reader.remote(), 2).ok() && status_of(ccq) == wc_status::success &&
                    std::memcmp(mine.data(), "read me!", 8) == 0;
  std::printf("type 1 window rkey %#x: bound %d, READ %s\n", reader.rkey(), bound1, read ? "ok" : "failed");

  // Type 2, write-only: bound by a BIND_MW WR, usable through `server` only.
  auto writer = spd.alloc_window<access::remote_write>();
  const post_result posted = writer.bind(server, lent, 4096, 1024, 3);
  if (!posted) std::printf("type 2 bind refused: %s (errno %d)\n", posted.message(), posted.err);
  const bool bound2 = posted.ok() && status_of(scq) == wc_status::success;
  if (!bound2) return 1;
  std::memcpy(mine.data() + 8, "written!", 8);
  const bool wrote = client.write(mine.local(8, 8), writer.remote(), 4).ok() &&
                     status_of(ccq) == wc_status::success && std::memcmp(lent.data() + 4096, "written!", 8) == 0;

  // The client gives the window back: a SEND that also invalidates it. The server's poll
  // of the receive is what tells the window (on any queue pair of the device); a LOCAL_INV
  // of a window already invalidated would fail (and panics rxe's kernel), so invalidate()
  // refuses it.
  const bool given_back = server.post_recv(lent.local(0, 64), 5).ok() &&
                          client.post(op::send_inv{mine.local(8, 8), writer.remote()}, 6).ok() &&
                          status_of(ccq) == wc_status::success && status_of(scq) == wc_status::success;
  bool refused = false;
  try {
    (void)writer.invalidate(server, 7);
  } catch (const usage_error& e) {
    refused = std::strstr(e.what(), "send_inv invalidated") != nullptr;
  }
  std::printf("type 2 window rkey %#x: bound %d, WRITE %s, given back by the client %d, invalidate() refused %d\n",
              writer.rkey(), bound2, wrote ? "ok" : "failed", given_back, refused);

  const bool kept_bound = kept.bind(server, lent, 2048, 1024, 12).ok() && status_of(scq) == wc_status::success;
  std::printf("type 2 window rkey %#x: bound to the end %d\n", kept.rkey(), kept_bound);

  // Bound again (a new rkey), written through, and this time invalidated by the server.
  const bool rebound = writer.bind(server, lent, 4096, 1024, 8).ok() && status_of(scq) == wc_status::success;
  const bool rewrote = client.write(mine.local(8, 8), writer.remote(), 9).ok() && status_of(ccq) == wc_status::success;
  const bool revoked = writer.invalidate(server, 10).ok() && status_of(scq) == wc_status::success;
  const wc_status after = client.write(mine.local(8, 8), writer.remote(), 11).ok() ? status_of(ccq) : wc_status::general_err;
  std::printf("type 2 window rkey %#x: bound again %d, WRITE %s, invalidated %d, WRITE after: %s\n", writer.rkey(),
              rebound, rewrote ? "ok" : "failed", revoked, to_string(after));
  return bound1 && read && bound2 && wrote && given_back && refused && kept_bound && rebound && rewrote && revoked &&
                 after == wc_status::rem_access_err
             ? 0
             : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
