// What a translation unit with rdmakit's core and the mock parses of the standard
// library (issue 12: compile cost). These headers cost every such unit megabytes of
// GCC's allocations and were taken out (bench/README.md, Compile cost); one coming back
// through a new include fails here. libstdc++ only (its include guards).
#include <rdmakit/rdmakit.hpp>
#include <rdmakit/backends/mock.hpp>

#if defined(__GLIBCXX__)
#ifdef _GLIBCXX_ALGORITHM
#error "<algorithm> is included: take <rdmakit/detail/algorithm.hpp> (the classic algorithms alone)"
#endif
#ifdef _GLIBCXX_MEMORY
#error "<memory> is included: rdmakit owns through detail/owning_ptr.hpp"
#endif
#ifdef _GLIBCXX_CHRONO
#error "<chrono> is included: take <rdmakit/detail/chrono.hpp> (durations and clocks without the calendar)"
#endif
#ifdef _GLIBCXX_FUNCTIONAL
#error "<functional> is included: take <rdmakit/detail/function.hpp> (std::function alone)"
#endif
#ifdef _GLIBCXX_THREAD
#error "<thread> is included: take <rdmakit/detail/thread.hpp>"
#endif
#if defined(_GLIBCXX_SSTREAM) || defined(_GLIBCXX_OSTREAM) || defined(_GLIBCXX_IOSTREAM)
#error "a stream header is included: format text with detail::cat (detail/text.hpp)"
#endif
#if defined(_GLIBCXX_MAP) || defined(_GLIBCXX_SET) || defined(_GLIBCXX_UNORDERED_MAP) || defined(_GLIBCXX_DEQUE)
#error "a node container is included: the mock keeps vectors, rings and its own object_map/object_set"
#endif
#ifdef _GLIBCXX_ATOMIC
#error "<atomic> is included: count with the __atomic builtins (as detail/owning_ptr.hpp)"
#endif
#if defined(_GLIBCXX_RANDOM) || defined(_GLIBCXX_CONDITION_VARIABLE)
#error "<random> or <condition_variable> is included: the mock has its own (random.hpp, condvar.hpp)"
#endif
#endif

int main() { return 0; }
