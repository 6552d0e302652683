#pragma once
// A file descriptor that is readable exactly while a queue of the mock has something in
// it (a channel's CQ events, a device's asynchronous events), so an event loop can wait
// for the mock with epoll as it waits for ibverbs' channel and async fds. An eventfd,
// written when the queue becomes non-empty and drained when it becomes empty again.
#include <rdmakit/config.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

RDMAKIT_BEGIN_NAMESPACE
namespace mock::detail {

class ready_fd {
 public:
  ready_fd() noexcept : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), err_(fd_ < 0 ? errno : 0) {}
  ready_fd(const ready_fd&) = delete;
  ready_fd& operator=(const ready_fd&) = delete;
  ~ready_fd() {
    if (fd_ >= 0) ::close(fd_);
  }

  /// The descriptor (-1 if the system refused an eventfd: the verb making its object
  /// fails then, check_ready_fd).
  int fd() const noexcept { return fd_; }
  /// Why eventfd refused (EMFILE: the process has no descriptor left), else 0.
  int error() const noexcept { return err_; }

  /// Makes the descriptor readable exactly when `nonempty`; called after every change
  /// of the queue it stands for (under the fabric lock).
  void sync(bool nonempty) noexcept {
    if (fd_ < 0 || nonempty == readable_) return;
    std::uint64_t v = 1;
    const ssize_t r = nonempty ? ::write(fd_, &v, sizeof v) : ::read(fd_, &v, sizeof v);
    if (r == static_cast<ssize_t>(sizeof v)) readable_ = nonempty;
  }

 private:
  int fd_;
  int err_;
  bool readable_ = false;
};

}  // namespace mock::detail
RDMAKIT_END_NAMESPACE
