// UD datagrams: two unreliable-datagram queue pairs on two devices (mock0 and mock1, or
// one real device), an address handle for the receiver, and several SENDs each naming
// its destination; then the receiver answers the sender, whose address it reads from a
// datagram (it was never told it).
// On RoCE every UD receive starts with a 40-byte GRH (Global Routing Header) that the
// HCA writes in front of the payload, so receive buffers reserve those 40 bytes and
// the payload is read from completion::payload_offset(). Those 40 bytes name the
// sender's GID (parse_grh), and the completion its QP number (src_qp).
#include "example_backend.hpp"

#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>

using namespace rdmakit;
using rdmakit_examples::B;

int main(int argc, char** argv) try {
  auto devices = rdmakit_examples::open_devices(argc, argv);  // mock0 and mock1, or one real device
  auto& dev0 = devices.first;
  auto& dev1 = devices.second;
  auto pd0 = dev0.create_pd();
  auto pd1 = dev1.create_pd();
  auto cq0 = dev0.create_cq(64);
  auto cq1 = dev1.create_cq(64);

  constexpr std::uint32_t count = 8;
  constexpr std::uint32_t slot = 128;  // per receive: 40 bytes of GRH + up to 88 of payload
  auto tx = pd0.allocate<access::local_write>((count + 1) * slot);  // the last slot takes the answer
  auto rx = pd1.allocate<access::local_write>(count * slot);

  // UD queue pairs have no peer: activate() takes them to RTS on their own.
  auto sender = pd0.create_qp<ud>(cq0, qp_cap{16, 16}).activate();
  auto receiver = pd1.create_qp<ud>(cq1, qp_cap{16, 16}).activate();

  // Receives first: a UD message that finds no receive is silently dropped.
  for (std::uint32_t i = 0; i < count; ++i)
    if (!receiver.post_recv(rx.local(i * slot, slot), i).ok()) return std::puts("post_recv failed"), 1;
  if (!sender.post_recv(tx.local(count * slot, slot), count).ok()) return std::puts("post_recv failed"), 1;

  // The receiver's endpoint (what a real peer would send over TCP: GID, QPN, Q_Key).
  // The address handle says how to reach its port (its GID: GRH on RoCE); ah.to(peer)
  // adds which QP behind that port and the Q_Key it accepts.
  const endpoint peer = receiver.local_endpoint();
  auto ah = pd0.create_ah(peer);
  const auto to = ah.to(peer);

  for (std::uint32_t i = 0; i < count; ++i) {
    const std::string msg = "datagram #" + std::to_string(i);
    std::memcpy(tx.data() + i * slot, msg.c_str(), msg.size() + 1);
    if (!sender.post(op::ud_send{tx.local(i * slot, msg.size() + 1), to}, i).ok())
      return std::puts("post failed"), 1;
  }

  // Collect the sender's send completions and the receiver's datagrams (bounded waits).
  std::uint32_t sent = 0, received = 0, bad = 0;
  std::optional<endpoint> client;  // who sent the datagrams, from the first one
  for (int tries = 0; sent < count && tries < 100; ++tries)
    cq0.wait([&](const completion<B>& c) { c.ok() ? ++sent : ++bad; }, std::chrono::milliseconds{100});
  for (int tries = 0; received < count && tries < 100; ++tries)
    cq1.wait([&](const completion<B>& c) {
      if (!c.ok()) return (void)++bad;
      // The payload starts after the GRH; payload_len() is byte_len() minus those 40 bytes.
      const char* p = reinterpret_cast<const char*>(rx.data() + c.wr_id() * slot + c.payload_offset());
      const std::string expected = "datagram #" + std::to_string(c.wr_id());
      const bool same = c.payload_len() == expected.size() + 1 && expected == p;
      std::printf("  wr_id %llu from QP %#x: %u bytes (GRH %u + payload %u) \"%s\"%s\n",
                  static_cast<unsigned long long>(c.wr_id()), c.src_qp(), c.byte_len(), c.payload_offset(),
                  c.payload_len(), p, same ? "" : "  MISMATCH");
      same ? ++received : ++bad;
      const auto grh = parse_grh(std::span(rx.data() + c.wr_id() * slot, grh_bytes));
      if (!client && grh) client = endpoint{.qpn = c.src_qp(), .gid = grh->source};
    }, std::chrono::milliseconds{100});

  // The answer: an address handle made from what the datagram said (the Q_Key is the
  // application's: here both sides use the default).
  bool answered = false;
  if (client) {
    std::printf("  the client: QP %#x, GID %s\n", client->qpn, client->gid.to_string().c_str());
    auto back = pd1.create_ah(*client);
    std::memcpy(rx.data(), "thanks", 7);
    if (!receiver.post(op::ud_send{rx.local(0, 7), back.to(*client)}, 100).ok()) return std::puts("post failed"), 1;
    for (int tries = 0; !answered && tries < 100; ++tries)
      cq0.wait([&](const completion<B>& c) {
        if (c.ok() && c.is_recv())
          answered = std::strcmp(reinterpret_cast<const char*>(tx.data() + count * slot + c.payload_offset()),
                                 "thanks") == 0;
      }, std::chrono::milliseconds{100});
    cq1.wait_for(1, [](const completion<B>&) {});  // the answer's send completion
  }

  std::printf("UD: %u sent, %u received intact, %u bad; answer %s\n", sent, received, bad,
              answered ? "received" : "LOST");
  return sent == count && received == count && bad == 0 && answered ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
