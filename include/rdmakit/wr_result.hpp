#pragma once
/// `wr_result<B>`: what `co_await` on a work request of an async_queue_pair gives back.
/// The WR completed (successfully or not: the completion says), or it never reached
/// the device (the post was refused: post() says why), or the wait ended first: its
/// timeout passed, or its queue pair went away (cancelled; status() is then
/// WR_FLUSH_ERR, as the device would have flushed it).
#include <rdmakit/completion.hpp>
#include <rdmakit/error.hpp>
#include <rdmakit/post_result.hpp>
#include <rdmakit/types.hpp>

#include <cstdint>
#include <optional>
#include <string>

RDMAKIT_BEGIN_NAMESPACE

/// How an awaited work request ended.
enum class wr_outcome : std::uint8_t {
  completed,   ///< the device completed it: see completion() (which may be an error)
  not_posted,  ///< the post was refused (queue pair in error, bad WR...): see post()
  timed_out,   ///< the timeout passed first; the WR goes on: await the same awaitable again for it
  cancelled,   ///< its async_queue_pair was destroyed before it completed
};

/// The outcome's name, as messages print it.
constexpr const char* to_string(wr_outcome o) noexcept {
  switch (o) {
    case wr_outcome::completed: return "completed";
    case wr_outcome::not_posted: return "not posted";
    case wr_outcome::timed_out: return "timed out";
    case wr_outcome::cancelled: return "cancelled";
  }
  return "?";
}

/// The result of one awaited work request (see the top of this header).
template <verbs_backend B>
class wr_result {
 public:
  /// A completed work request.
  explicit wr_result(const rdmakit::completion<B>& c) noexcept : outcome_(wr_outcome::completed), completion_(c) {}
  /// A refused post.
  explicit wr_result(const post_result& r) noexcept : outcome_(wr_outcome::not_posted), post_(r) {}
  /// A wait that ended without a completion (timed_out or cancelled).
  explicit wr_result(wr_outcome o) noexcept : outcome_(o) {}

  /// How the wait ended: completed, not_posted, timed_out or cancelled.
  wr_outcome outcome() const noexcept { return outcome_; }
  /// True when the work request completed successfully.
  bool ok() const noexcept { return completion_ && completion_->ok(); }
  /// ok(): `if (co_await qp.write(...))`.
  explicit operator bool() const noexcept { return ok(); }
  /// The completion's status; WR_FLUSH_ERR when cancelled; GENERAL_ERR when the WR was
  /// not posted or timed out (outcome() and post() say more).
  wc_status status() const noexcept {
    if (completion_) return completion_->status();
    return outcome_ == wr_outcome::cancelled ? wc_status::wr_flush_err : wc_status::general_err;
  }
  /// The completion (outcome() == completed); throws usage_error otherwise.
  const rdmakit::completion<B>& completion() const {
    if (!completion_)
      throw usage_error(detail::cat("wr_result::completion(): the work request did not complete (",
                                    to_string(outcome_), "): check outcome() first"));
    return *completion_;
  }
  /// Why the post was refused (outcome() == not_posted; a default post_result otherwise).
  const post_result& post() const noexcept { return post_; }
  /// One line: the completion's status message (without its wr_id, which the async
  /// layer chose), or what happened instead.
  std::string message() const {
    if (completion_) {
      const auto& c = *completion_;
      return detail::status_message(c.status(), c.is_recv(), 0, c.qp_num(), false);
    }
    if (outcome_ == wr_outcome::not_posted) return detail::cat("not posted: ", post_.message());
    return to_string(outcome_);
  }

 private:
  wr_outcome outcome_;
  std::optional<rdmakit::completion<B>> completion_;
  post_result post_{};
};

RDMAKIT_END_NAMESPACE
