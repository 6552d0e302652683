#pragma once
// What a destructor that cannot throw does about a misuse it sees: it ends the program,
// saying why. A test runs the misuse in a forked child and gets back whether the child
// ended by SIGABRT and what it wrote to stderr. (A fork of a threaded program: not under
// TSan, RDMAKIT_TEST_TSAN in sanitized.hpp.)
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <string>

namespace child_abort {

struct outcome {
  bool aborted = false;  // ended by SIGABRT
  std::string said;      // its stderr
};

/// Runs `misuse` in a forked child (which exits 0 if it returns) and reports how it ended.
template <class F>
outcome run_in_child(F misuse) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(fds[1], 2);
    std::signal(SIGABRT, SIG_DFL);  // not doctest's crash report
    misuse();
    ::_exit(0);
  }
  ::close(fds[1]);
  outcome o;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) o.said.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  if (child > 0 && ::waitpid(child, &status, 0) == child) o.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  return o;
}

}  // namespace child_abort
