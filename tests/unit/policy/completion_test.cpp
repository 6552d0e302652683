#include "fixture.hpp"

using namespace policy_test;

TEST_CASE("completion view: wr_id without the receive bit, imm in host order, UD payload offset") {
  B::wc w;
  w.wr_id = 42 | detail::recv_wr_bit;
  w.status = wc_status::success;
  w.opcode = wc_opcode::recv;
  w.byte_len = 40 + 100;
  w.qp_num = 7;
  w.src_qp = 9;
  w.flags = wc_flags::grh | wc_flags::with_imm;
  w.imm_data = 0x04030201;  // network order of 0x01020304 on little-endian hosts
  completion<B> c(w, ud::recv_offset);
  CHECK(c.wr_id() == 42);
  CHECK(c.is_recv());
  CHECK_FALSE(c.is_send());
  CHECK(c.ok());
  CHECK(c.opcode() == wc_opcode::recv);
  CHECK(c.byte_len() == 140);
  CHECK(c.payload_offset() == 40);
  CHECK(c.payload_len() == 100);
  CHECK(c.qp_num() == 7);
  CHECK(c.src_qp() == 9);
  CHECK(c.has_grh());
  CHECK(c.has_imm());
  if constexpr (std::endian::native == std::endian::little) CHECK(c.imm() == 0x01020304u);
  CHECK(c.status_message() == "success");
  CHECK(c.native().wr_id == w.wr_id);  // a copy: it may outlive the polled batch
}

TEST_CASE("send completions have no payload offset, even on UD") {
  B::wc w;
  w.wr_id = 5;
  w.byte_len = 16;
  completion<B> c(w, ud::recv_offset);
  CHECK(c.is_send());
  CHECK(c.payload_offset() == 0);
  CHECK(c.payload_len() == 16);
}

TEST_CASE("status_message names the status, the queue, the wr_id, the QP (in hex) and the usual cause") {
  B::wc w;
  w.wr_id = 3;
  w.status = wc_status::rem_access_err;
  w.qp_num = 17;
  completion<B> c(w);
  auto s = c.status_message();
  CHECK(s.find("remote access error") != std::string::npos);
  CHECK(s.find("send wr_id 3") != std::string::npos);
  CHECK(s.find("of QP 0x11:") != std::string::npos);  // in hex, as endpoints and the tools print it
  CHECK(s.find("remote key") != std::string::npos);
  // An awaited WR's text (wr_result::message): its wr_id is the async layer's, left out.
  const std::string awaited = detail::status_message(c.status(), c.is_recv(), c.wr_id(), c.qp_num(), false);
  CHECK(awaited == to_string(wc_status::rem_access_err) + std::string(" on send of QP 0x11: ") +
                       explain(wc_status::rem_access_err));
  CHECK(awaited.find("wr_id") == std::string::npos);
  CHECK(c.error_code() == make_error_code(wc_status::rem_access_err));

  w.status = wc_status::wr_flush_err;
  w.wr_id = 8 | detail::recv_wr_bit;
  CHECK(completion<B>(w).status_message().find("receive wr_id 8") != std::string::npos);
  for (std::uint32_t s2 = 1; s2 <= static_cast<std::uint32_t>(wc_status::general_err); ++s2)
    CHECK(std::string(explain(static_cast<wc_status>(s2))).size() > 5);
  // A peer whose CQ overflowed (it did not poll) goes to ERR and answers nothing: the
  // sender's RETRY_EXC_ERR named only an endpoint exchange gone wrong (audit 37).
  CHECK(std::string(explain(wc_status::retry_exc_err)).find("CQ overflowed") != std::string::npos);
}
