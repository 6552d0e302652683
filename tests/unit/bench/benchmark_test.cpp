// <rdmakit/benchmark.hpp>: policy names, the grid's cross product (order, count, names,
// the loop's constraint leaving combinations out, per-combination settings), and the
// loopback pair run through Google Benchmark on the mock.
#include <rdmakit/backends/mock.hpp>
#include <rdmakit/benchmark.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

using namespace rdmakit;
using B = backends::mock;
using bench::list;

namespace {

// User policies: a template of values, a plain type, a template of a type, and two
// distinct types that share a name.
template <unsigned Spins>
struct my_poll : busy_poll<8> {
  static constexpr std::string_view name = "my_poll";
};
struct plain_poll : busy_poll<8> {
  static constexpr std::string_view name = "plain_poll";
};
template <class Clock>
struct clocked_poll : busy_poll<8> {
  static constexpr std::string_view name = "clocked_poll";
};
struct twin_a : busy_poll<8> {
  static constexpr std::string_view name = "twin";
};
struct twin_b : busy_poll<8> {
  static constexpr std::string_view name = "twin";
};

constexpr bool relaxed_ttp = [] {
#if defined(__cpp_template_template_args) && __cpp_template_template_args >= 201611L
  return true;
#else
  return false;
#endif
}();

// Runs the benchmarks whose names match `filter`, silently; returns the names of the
// runs, and puts the error message of each that failed in `errors` when given.
std::vector<std::string> run(const std::string& filter, std::map<std::string, std::string>* errors = nullptr) {
  struct quiet : benchmark::BenchmarkReporter {
    std::vector<std::string> names;
    std::map<std::string, std::string> errors;
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>& runs) override {
      for (const auto& r : runs) {
        names.push_back(r.benchmark_name());
        if (r.error_occurred) errors[r.benchmark_name()] = r.error_message;
      }
    }
  } reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter, filter);
  if (errors) *errors = reporter.errors;
  return reporter.names;
}

}  // namespace

TEST_CASE("policy_name: the policy's name and, for a template of values, its arguments") {
  CHECK(bench::policy_name<rc>() == "RC");
  CHECK(bench::policy_name<ud>() == "UD");
  CHECK(bench::policy_name<signal_all>() == "signal_all");
  CHECK(bench::policy_name<signal_manual>() == "signal_manual");
  CHECK(bench::policy_name<plain_poll>() == "plain_poll");
  CHECK(bench::policy_name<clocked_poll<int>>() == "clocked_poll");  // a type argument: the name alone
  // rdmakit's own: with every compiler.
  CHECK(bench::policy_name<signal_every<16>>() == "signal_every<16>");
  CHECK(bench::policy_name<busy_poll<16>>() == "busy_poll<16>");
  CHECK(bench::policy_name<busy_poll<>>() == "busy_poll<16>");  // defaults spelled out
  CHECK(bench::policy_name<event_driven<16, 4>>() == "event_driven<16,4>");
  CHECK(bench::policy_name<adaptive<1024, 16, 16>>() == "adaptive<1024,16,16>");
  // A user's: where the compiler matches template <auto...> (P0522).
  CHECK(bench::policy_name<my_poll<64>>() == (relaxed_ttp ? "my_poll<64>" : "my_poll"));
  CHECK(bench::config<uc, signal_all, plain_poll>::name() == "UC/signal_all/plain_poll");
}

TEST_CASE("register_grid: the cross product, transport-major, named from the policies") {
  auto fam = bench::register_grid<list<rc, uc>, list<signal_all, signal_manual>, list<plain_poll, twin_a, twin_b>>(
      "unit_names", [](auto, benchmark::State& st) {
        for (auto _ : st) {
        }
      });
  static_assert(decltype(fam)::size() == 2 * 2 * 3);
  const std::vector<std::string> want = {
      "unit_names/RC/signal_all/plain_poll",    "unit_names/RC/signal_all/twin",
      "unit_names/RC/signal_all/twin#3",        "unit_names/RC/signal_manual/plain_poll",
      "unit_names/RC/signal_manual/twin",       "unit_names/RC/signal_manual/twin#3",
      "unit_names/UC/signal_all/plain_poll",    "unit_names/UC/signal_all/twin",
      "unit_names/UC/signal_all/twin#3",        "unit_names/UC/signal_manual/plain_poll",
      "unit_names/UC/signal_manual/twin",       "unit_names/UC/signal_manual/twin#3"};
  CHECK(fam.names() == want);

  // No prefix: the configuration's name alone.
  auto bare = bench::register_grid<list<ud>, list<signal_all>, list<plain_poll>>("", [](auto, benchmark::State&) {});
  CHECK(bare.names() == std::vector<std::string>{"UD/signal_all/plain_poll"});
}

TEST_CASE("register_grid: the loop's constraint leaves combinations out") {
  auto reads = bench::register_grid<list<rc, uc, ud>, list<signal_all, signal_manual>, list<plain_poll>>(
      "unit_filter", []<class T, class S, class P>(bench::config<T, S, P>, benchmark::State&)
        requires T::supports_read
      {});
  static_assert(decltype(reads)::size() == 2);
  static_assert(std::is_same_v<decltype(reads)::configs, list<bench::config<rc, signal_all, plain_poll>,
                                                              bench::config<rc, signal_manual, plain_poll>>>);
  CHECK(reads.names() ==
        std::vector<std::string>{"unit_filter/RC/signal_all/plain_poll", "unit_filter/RC/signal_manual/plain_poll"});
  // Leaving every combination out is a compile error (compile_fail bench_grid_takes_none).
}

// A loopback the loop could not make (a message of 0 bytes, an unknown device) threw out
// of the benchmark function: std::terminate, and the program's other benchmarks and its
// report were lost (found by an audit).
TEST_CASE("register_grid: what the loop throws fails its benchmark, named; the others run") {
  static int later_runs = 0;
  bench::register_grid<list<rc>, list<signal_all>, list<plain_poll>>("unit_throws", [](auto cfg, benchmark::State& st) {
    bench::loopback lp(cfg, device<B>("mock0"), 0);
    for (auto _ : st) {
    }
  });
  bench::register_grid<list<rc>, list<signal_all>, list<plain_poll>>("unit_throws_not_std", [](auto, benchmark::State&) {
    throw 7;
  });
  bench::register_grid<list<uc>, list<signal_all>, list<plain_poll>>("unit_throws_later", [](auto, benchmark::State& st) {
    for (auto _ : st) {
    }
    ++later_runs;
  }).Iterations(1);
  std::map<std::string, std::string> errors;
  const auto runs = run("^unit_throws", &errors);
  CHECK(runs.size() == 3);
  REQUIRE(errors.size() == 2);
  // (Google Benchmark names a run measured in wall-clock time ".../real_time".)
  const std::string& bad_size = errors["unit_throws/RC/signal_all/plain_poll/real_time"];
  CHECK(bad_size.find("unit_throws/RC/signal_all/plain_poll: ") == 0);
  CHECK(bad_size.find("a message of 0 bytes") != std::string::npos);
  CHECK(errors["unit_throws_not_std/RC/signal_all/plain_poll/real_time"].find("not derived from std::exception") !=
        std::string::npos);
  CHECK(later_runs == 1);
}

// Two grids of one name registered rows of one name, each another loop's, silently
// (helper-101's audit, F8).
TEST_CASE("register_grid: a name a grid gave already is refused, before anything is registered") {
  auto loop = [](auto, benchmark::State& st) {
    for (auto _ : st) {
    }
  };
  (void)bench::register_grid<list<rc>, list<signal_all>, list<plain_poll>>("unit_dup", loop);
  CHECK_THROWS_WITH_AS((bench::register_grid<list<uc, rc>, list<signal_all>, list<plain_poll>>("unit_dup", loop)),
                       doctest::Contains("a benchmark named \"unit_dup/RC/signal_all/plain_poll\" is registered already"),
                       usage_error);
  CHECK(run("^unit_dup/").size() == 1);  // the refused grid's UC row was not registered either
}

TEST_CASE("family: settings for all, or per combination; each benchmark gets its own config") {
  static std::map<std::string, int> calls;  // configuration name -> runs
  auto fam = bench::register_grid<list<rc, ud>, list<signal_all>, list<plain_poll>>(
      "unit_each", [](auto cfg, benchmark::State& st) {
        for (auto _ : st) {
        }
        ++calls[decltype(cfg)::name()];
      });
  fam.Iterations(1).Arg(8).each([](auto cfg, benchmark::internal::Benchmark* b) {
    if constexpr (decltype(cfg)::transport_policy::connected) b->Arg(65536);
  });
  const auto runs = run("^unit_each/");
  CHECK(runs == std::vector<std::string>{"unit_each/RC/signal_all/plain_poll/8/iterations:1/real_time",
                                         "unit_each/RC/signal_all/plain_poll/65536/iterations:1/real_time",
                                         "unit_each/UD/signal_all/plain_poll/8/iterations:1/real_time"});
  CHECK(calls == std::map<std::string, int>{{"RC/signal_all/plain_poll", 2}, {"UD/signal_all/plain_poll", 1}});
}

TEST_CASE("loopback: WRITE, READ, SEND on every transport, completions accounted, errors reported") {
  struct result {
    bool ok;
    std::uint64_t received, failures;
  };
  static std::map<std::string, result> results;
  // 200 operations per iteration through a 16-deep send queue: post() waits for credits.
  // Every transport once, and every signaling and polling policy once (two small grids
  // rather than their 18-way product: each combination is a compile of its own).
  auto loop = [](auto cfg, benchmark::State& st) {
    bench::loopback lp(cfg, device<B>("mock0"), device<B>("mock1"), 256, {.caps = {16, 16}});
    for (auto _ : st) {
      for (int i = 0; i < 200; ++i) {
        lp.refill();
        if (!lp.send(static_cast<std::uint64_t>(i))) break;
      }
    }
    const bool ok = lp.finish(st);
    results[decltype(cfg)::name()] = {ok, lp.received, lp.failures};
  };
  bench::register_grid<list<rc, uc, ud>, list<signal_every<4>>, list<busy_poll<4>>>("unit_loopback", loop)
      .Iterations(2);
  bench::register_grid<list<rc>, list<signal_all, signal_manual>, list<event_driven<4, 2>>>("unit_loopback", loop)
      .Iterations(2);
  (void)run("^unit_loopback/");
  CHECK(results.size() == 3 + 2);
  for (const auto& [config, r] : results) {
    const std::string& name = config;  // INFO's lambda: clang 14 cannot capture a binding
    INFO(name);
    CHECK(r.ok);
    CHECK(r.failures == 0);
    CHECK(r.received == 400);
  }

  static std::vector<std::uint8_t> read_back;
  auto rw = bench::register_grid<list<rc>, list<signal_every<8>>, list<busy_poll<8>>>(
      "unit_rw", [](auto cfg, benchmark::State& st) {
        bench::loopback lp(cfg, device<B>("mock0"), 64);
        std::byte* src = lp.a.msg.data();
        for (int i = 0; i < 64; ++i) src[i] = std::byte(i);
        for (auto _ : st)
          if (!lp.post(op::write{lp.a.msg, lp.b.remote}, 1)) break;
        for (int i = 0; i < 64; ++i) src[i] = std::byte{0};
        (void)lp.post(op::read{lp.a.msg, lp.b.remote}, 2, send_flags::signaled);
        CHECK(lp.finish(st));
        read_back.assign(reinterpret_cast<const std::uint8_t*>(src), reinterpret_cast<const std::uint8_t*>(src) + 64);
      });
  rw.Iterations(100);
  (void)run("^unit_rw/");
  REQUIRE(read_back.size() == 64);
  for (int i = 0; i < 64; ++i) CHECK(read_back[static_cast<std::size_t>(i)] == i);

  // A WRITE to a region with the wrong rkey fails its completion: finish() says so.
  static std::string error;
  auto bad = bench::register_grid<list<rc>, list<signal_all>, list<busy_poll<8>>>(
      "unit_bad", [](auto cfg, benchmark::State& st) {
        bench::loopback lp(cfg, device<B>("mock0"), 64);
        const auto wrong = remote_region<access::remote_write>::unchecked(lp.b.remote.addr(), lp.b.remote.rkey() + 1, 64);
        for (auto _ : st)
          if (!lp.post(op::write{lp.a.msg, wrong})) break;
        CHECK_FALSE(lp.finish(st));
        CHECK(lp.failures > 0);
        error = st.error_occurred() ? "skipped" : "";
      });
  bad.Iterations(4);
  (void)run("^unit_bad/");
  CHECK(error == "skipped");
}

// A queue pair in ERR has no send credit either: post() waited out the whole timeout for
// one, then said sq_full ("poll, then post again", which a loop did for ever, a timeout
// each pass); the device's own answer is qp_error.
TEST_CASE("loopback: after a failed completion, post() says qp_error at once, not sq_full after the timeout") {
  using namespace std::chrono;
  bench::loopback<B, rc, signal_every<4>> lp(device<B>("mock0"), device<B>("mock1"), 64,
                                              {.caps = {8, 8}, .timeout = 300ms});
  const auto wrong = remote_region<access::remote_write>::unchecked(lp.b.remote.addr(), lp.b.remote.rkey() ^ 0x55, 64);
  REQUIRE(lp.post(op::write{lp.a.msg, wrong}, 1, send_flags::signaled).ok());
  const auto t0 = steady_clock::now();
  post_status last = post_status::ok;
  for (std::uint64_t i = 0; i < 12 && last == post_status::ok; ++i)
    last = lp.post(op::write{lp.a.msg, lp.b.remote}, 2 + i).status;
  CHECK(last == post_status::qp_error);
  CHECK(steady_clock::now() - t0 < 250ms);
  CHECK(lp.timeouts == 0);
  CHECK(lp.failures >= 1);
}

// finish() waited only for signaled WRs: under signal_every<N> and signal_manual the WRs
// after the last signaled one have no completion of their own, and their failures went
// unseen: the link went down under the last 8 of 40 WRITEs and the run reported success
// (helper-101's audit, F1). finish() now posts one signaled WR after them.
TEST_CASE("loopback: finish() sees a failure among the unsignaled WRs after the last signaled one") {
  static std::map<std::string, std::pair<bool, std::uint64_t>> results;  // finish(), failures
  bench::register_grid<list<rc>, list<signal_every<16>, signal_manual>, list<busy_poll<8>>>(
      "unit_tail", [](auto cfg, benchmark::State& st) {
        mock::fabric fab;
        bench::loopback lp(cfg, device<B>(fab, "mock0"), device<B>(fab, "mock1"), 64, {.caps = {64, 8}});
        int i = 0;
        for (auto _ : st) {
          if (i++ == 40 - 8) fab.set_port_up("mock1", 1, false);
          if (!lp.post(op::write{lp.a.msg, lp.b.remote})) break;
        }
        const bool ok = lp.finish(st);
        results[decltype(cfg)::name()] = {ok, lp.failures};
      })
      .Iterations(40);
  std::map<std::string, std::string> errors;
  (void)run("^unit_tail/", &errors);
  CHECK(results.size() == 2);
  for (const auto& [config, r] : results) {
    const std::string& name = config;
    INFO(name);
    CHECK_FALSE(r.first);
    CHECK(r.second >= 1);
  }
  CHECK(errors.size() == 2);
}

// post() gave a SEND no receive of its own: refill() topped b's receive queue up without
// counting the SENDs on the way, so with wire latency UD and UC SENDs found none and
// were dropped (36-46 % of them) in a run that reported success, and RC's met RNR
// (helper-101's audit, F2). Here as bench/policy_grid.cpp posts: a refill, then a
// window of 64 SENDs as deep as b's receive queue.
TEST_CASE("loopback: with messages on the way, every SEND finds a receive at b") {
  static std::map<std::string, std::pair<bool, std::uint64_t>> results;  // finish(), received
  bench::register_grid<list<rc, uc, ud>, list<signal_every<16>>, list<busy_poll<16>>>(
      "unit_on_the_way", [](auto cfg, benchmark::State& st) {
        mock::fabric_config c;
        c.latency = std::chrono::microseconds(200);
        c.clock = mock::clock_mode::wall;
        mock::fabric fab(c);
        bench::loopback lp(cfg, device<B>(fab, "mock0"), device<B>(fab, "mock1"), 64);
        for (auto _ : st) {
          lp.refill();
          for (int w = 0; w < 64; ++w)
            if (!lp.send()) break;
        }
        const bool ok = lp.finish(st);
        results[decltype(cfg)::name()] = {ok, lp.received};
      })
      .Iterations(10);
  (void)run("^unit_on_the_way/");
  CHECK(results.size() == 3);
  for (const auto& [config, r] : results) {
    const std::string& name = config;
    INFO(name);
    CHECK(r.first);
    CHECK(r.second == 10 * 64);
  }
}

// UC and UD lose messages without telling the sender: 10 % of them dropped on the way,
// the run reported success and its rate counted them (helper-101's audit, F3).
TEST_CASE("loopback: messages lost on the way fail the run, saying how many") {
  static std::map<std::string, std::pair<bool, std::uint64_t>> results;  // finish(), received
  bench::register_grid<list<uc, ud>, list<signal_all>, list<busy_poll<16>>>(
      "unit_lost", [](auto cfg, benchmark::State& st) {
        mock::fabric fab;
        fab.inject({.kind = mock::fault_kind::drop, .count = 0, .probability = 0.1});
        bench::loopback lp(cfg, device<B>(fab, "mock0"), device<B>(fab, "mock1"), 64,
                           {.timeout = std::chrono::milliseconds(50)});
        for (auto _ : st)
          if (!lp.send()) break;
        const bool ok = lp.finish(st);
        results[decltype(cfg)::name()] = {ok, lp.received};
      })
      .Iterations(400);
  std::map<std::string, std::string> errors;
  (void)run("^unit_lost/", &errors);
  CHECK(results.size() == 2);
  for (const auto& [config, r] : results) {
    const std::string& name = config;
    INFO(name);
    CHECK_FALSE(r.first);
    CHECK(r.second < 400);
    CHECK(r.second > 300);
  }
  REQUIRE(errors.size() == 2);
  for (const auto& entry : errors) {
    const std::string& message = entry.second;  // (INFO's lambda: clang 14 cannot capture a binding)
    INFO(message);
    CHECK(message.find(" of the 400 messages a sent never reached b") != std::string::npos);
  }
}

// A timeout of 0 or less made every wait for a send credit a few polls: on a device a
// run failed with "wait(s) timed out" (naming no option), on the mock it went unnoticed.
TEST_CASE("loopback: a timeout of zero or less is refused, naming the field") {
  using namespace std::chrono_literals;
  for (const auto t : {0ms, -5ms}) {
    CAPTURE(t.count());
    CHECK_THROWS_WITH_AS((bench::loopback<B, rc>(device<B>("mock0"), 64, {.timeout = t})),
                         doctest::Contains(("loopback_options::timeout = " + std::to_string(t.count()) + " ms").c_str()),
                         usage_error);
  }
  // A finer negative one is not cut to 0 and taken for "none given": refused too.
  CHECK_THROWS_AS((bench::loopback<B, rc>(device<B>("mock0"), 64, {.timeout = std::chrono::microseconds(-500)})),
                  usage_error);
  bench::loopback<B, rc> lp(device<B>("mock0"), 64, {.timeout = 1ms});  // the smallest positive one
  CHECK(lp.bytes() == 64);
}

// A size past a message's (UD's bytes + 40 wrapped to a 39-byte buffer, silently), or
// of 0, and queue depths whose sum a CQ cannot count (create_cq was told 0 or a negative
// size) are refused by loopback, naming what it was given.
TEST_CASE("loopback: a message size or queue depths it cannot make buffers and CQs for are refused") {
  CHECK_THROWS_WITH_AS((bench::loopback<B, ud>(device<B>("mock0"), SIZE_MAX)),
                       doctest::Contains("bench::loopback: a message of 18446744073709551615 bytes"), usage_error);
  CHECK_THROWS_WITH_AS((bench::loopback<B, rc>(device<B>("mock0"), 0)),
                       doctest::Contains("bench::loopback: a message of 0 bytes"), usage_error);
  // Arg(-1), as the size_t it becomes: the message said only "18446744073709551615 bytes".
  CHECK_THROWS_WITH_AS((bench::loopback<B, rc>(device<B>("mock0"), static_cast<std::size_t>(std::int64_t{-1}))),
                       doctest::Contains("a negative Arg() converts to a size this large"), usage_error);
  // A UD message above the MTU failed at each completion, after its buffers were
  // allocated (4.4 GB at 2^31 bytes; helper-101's audit, F7).
  const std::uint32_t mtu = mtu_bytes(device<B>("mock0").port().active_mtu);
  const std::string above_mtu = "bench::loopback: a UD message of " + std::to_string(mtu + 1) +
                                " bytes on mock0, whose port 1 carries at most " + std::to_string(mtu);
  CHECK_THROWS_WITH_AS((bench::loopback<B, ud>(device<B>("mock0"), std::size_t{mtu} + 1)),
                       doctest::Contains(above_mtu.c_str()), usage_error);
  CHECK_NOTHROW((void)bench::loopback<B, ud>(device<B>("mock0"), mtu));
  CHECK_THROWS_WITH_AS((bench::loopback<B, rc>(device<B>("mock0"), 64, {.caps = {1u << 31, 1u << 31}})),
                       doctest::Contains("loopback_options::caps asks for 2147483648 send and 2147483648 receive"),
                       usage_error);
  // A send queue of 0 slots: every post() waited out the timeout for a credit that never
  // comes and said sq_full (found by an audit), and {0, 0} named create_cq().
  for (const qp_cap caps : {qp_cap{0, 8}, qp_cap{0, 0}})
    CHECK_THROWS_WITH_AS((bench::loopback<B, rc>(device<B>("mock0"), 64, {.caps = caps})),
                         doctest::Contains("loopback_options::caps.max_send_wr = 0"), usage_error);
}

// A loop that leaves `for (auto _ : st)` early without an error (its own reason, or a
// failed post without finish()): Google Benchmark's check aborted the whole program,
// every later benchmark lost (an audit). The run fails, named, and the others run.
TEST_CASE("register_grid: a loop leaving its timing loop early fails its benchmark, named; the others run") {
  static int later_runs = 0;
  bench::register_grid<list<rc>, list<signal_all>, list<plain_poll>>("unit_early_break", [](auto, benchmark::State& st) {
    for (auto _ : st) break;
  }).Iterations(10);
  bench::register_grid<list<uc>, list<signal_all>, list<plain_poll>>("unit_early_break_later",
                                                                        [](auto, benchmark::State& st) {
                                                                          for (auto _ : st) {
                                                                          }
                                                                          ++later_runs;
                                                                        })
      .Iterations(1);
  std::map<std::string, std::string> errors;
  const auto runs = run("^unit_early_break", &errors);
  CHECK(runs.size() == 2);
  REQUIRE(errors.size() == 1);
  const std::string& why = errors.begin()->second;
  CHECK(why.find("unit_early_break/RC/signal_all/plain_poll: ") == 0);
  INFO(why);
  CHECK(why.find("left `for (auto _ : state)` after 0 of 10 iterations") != std::string::npos);  // (a break in the first counts none)
  CHECK(later_runs == 1);
}

// A latency loop reaps b's CQ itself (the loopback has no wait for b's receive): finish()
// counted only the receives it reaped, so every message "never reached b", and a
// SEND found b's receives all taken by messages long delivered (an audit).
TEST_CASE("loopback: messages the loop reaped on b itself count as received") {
  static std::map<std::string, bool> finished;
  bench::register_grid<list<rc, uc, ud>, list<signal_all>, list<busy_poll<16>>>(
      "unit_oneway", [](auto cfg, benchmark::State& st) {
        bench::loopback lp(cfg, device<B>("mock0"), 64);
        for (auto _ : st) {
          if (!lp.send()) break;
          int got = 0;
          for (int tries = 0; got == 0 && tries < 1000; ++tries)
            got = lp.b.cq.poll([](const completion<B>&) {});
          if (got == 0) break;
        }
        finished[decltype(cfg)::name()] = lp.finish(st);
      })
      .Iterations(200);
  std::map<std::string, std::string> errors;
  (void)run("^unit_oneway/", &errors);
  CHECK(finished.size() == 3);
  for (const auto& [config, ok] : finished) {
    const std::string& name = config;
    INFO(name);
    CHECK(ok);
  }
  CHECK_MESSAGE(errors.empty(), (errors.empty() ? std::string() : errors.begin()->second));
}

// SENDs on a loopback without receive slots waited out the timeout at every post, then
// failed with "1 wait(s) timed out", naming no cause (an audit); a queue deeper than the
// device's CQs named create_cq, which the caller never called.
TEST_CASE("loopback: a SEND without receive slots, or queues a CQ cannot hold, are refused by name") {
  bench::loopback<B, rc> lp(device<B>("mock0"), 64, {.caps = {8, 0}, .timeout = std::chrono::milliseconds(50)});
  const post_result r = lp.send();
  CHECK_FALSE(r.ok());
  CHECK(lp.failures == 1);
  CHECK(lp.timeouts == 0);
  CHECK(lp.post(op::write{lp.a.msg, lp.b.remote}).ok());  // a WRITE needs none
  const std::uint32_t max_cqe = device<B>("mock0").attr().max_cqe;
  const std::string deep = "loopback_options::caps asks for " + std::to_string(max_cqe) + " send and 8 receive WRs";
  CHECK_THROWS_WITH_AS((bench::loopback<B, rc>(device<B>("mock0"), 64, {.caps = {max_cqe, 8}})),
                       doctest::Contains(deep.c_str()), usage_error);
}

// Settings past Google Benchmark's range (MinTime(0), Iterations(0), Repetitions(0))
// ended the program in its checks, naming no benchmark (an audit): usage_error, and the
// grid is left as it was.
TEST_CASE("family: a setting Google Benchmark would refuse by ending the program is a usage_error") {
  auto grid = bench::register_grid<list<rc>, list<signal_all>, list<plain_poll>>("unit_settings", [](auto, benchmark::State& st) {
    for (auto _ : st) {
    }
  });
  CHECK_THROWS_WITH_AS(grid.MinTime(0), doctest::Contains("bench::family::MinTime(0) on the grid of unit_settings/RC"),
                       usage_error);
  CHECK_THROWS_WITH_AS(grid.Iterations(0), doctest::Contains("Iterations(0)"), usage_error);
  CHECK_THROWS_WITH_AS(grid.Repetitions(-1), doctest::Contains("Repetitions(-1)"), usage_error);
  grid.Iterations(1);
  CHECK(run("^unit_settings/").size() == 1);
}

// A post list or a prepared WR had no way through the loopback: posted on lp.a.qp
// directly, it skipped the waits for credits and b's receives, and its refusals counted
// nowhere (an audit: 64 of 443,718 list posts were taken, and finish() passed). lp.post
// takes both, waiting for the list's credits and giving each WR that takes a receive one.
TEST_CASE("loopback: post lists and prepared WRs go through post(), credits waited for, receives given") {
  struct result {
    bool ok;
    std::uint64_t received, sent, failures;
  };
  static std::map<std::string, result> results;
  bench::register_grid<list<rc, uc>, list<signal_every<4>, signal_manual>, list<busy_poll<4>>>(
      "unit_lists", [](auto cfg, benchmark::State& st) {
        // 10 slots, the WRs of one iteration: under signal_manual its last takes the last
        // free slot and is signaled (a list that found slots held by unsignaled WRs alone
        // would be refused, no_completion_due, as qp.post refuses it).
        bench::loopback lp(cfg, device<B>("mock0"), device<B>("mock1"), 64, {.caps = {10, 8}});
        // 8 WRs, a WRITE and a SEND in turn, posted again and again (reuse): 4 take receives.
        auto l = decltype(lp.a.qp)::template make_batch<8>();
        l.reuse();
        for (std::uint64_t i = 0; i < 8; ++i)
          CHECK((i % 2 ? l.add(op::send<>{lp.a.msg}, i) : l.add(op::write{lp.a.msg, lp.b.remote}, i)));
        CHECK(l.receives_needed() == 4);
        auto w = lp.a.qp.prepare(op::write{lp.a.msg, lp.b.remote}, 100);
        auto s = lp.a.qp.prepare(op::send<>{lp.a.msg}, 101);
        CHECK_FALSE(w.needs_receive());
        CHECK(s.needs_receive());
        for (auto _ : st) {
          if (!lp.post(l) || !lp.post(w) || !lp.post(s)) break;
        }
        const bool ok = lp.finish(st);
        results[decltype(cfg)::name()] = {ok, lp.received, lp.sent, lp.failures};
      })
      .Iterations(50);
  std::map<std::string, std::string> errors;
  (void)run("^unit_lists/", &errors);
  CHECK(results.size() == 4);
  for (const auto& [config, r] : results) {
    const std::string& name = config;
    INFO(name);
    CHECK(r.ok);
    CHECK(r.failures == 0);
    CHECK(r.sent == 50 * 5);
    CHECK(r.received == 50 * 5);
  }
  CHECK_MESSAGE(errors.empty(), (errors.empty() ? std::string() : errors.begin()->second));

  // UD: a list is posted once (its WRs name address handles), each its own SEND.
  static result ud_run{};
  bench::register_grid<list<ud>, list<signal_every<4>>, list<busy_poll<4>>>(
      "unit_ud_lists", [](auto cfg, benchmark::State& st) {
        bench::loopback lp(cfg, device<B>("mock0"), 64, {.caps = {16, 8}});
        for (auto _ : st) {
          auto l = decltype(lp.a.qp)::template make_batch<6>();
          for (std::uint64_t i = 0; i < 6; ++i) CHECK(l.add(op::ud_send<B>{lp.a.msg, lp.a.to}, i));
          if (!lp.post(l)) break;
        }
        ud_run = {lp.finish(st), lp.received, lp.sent, lp.failures};
      })
      .Iterations(40);
  (void)run("^unit_ud_lists/");
  CHECK(ud_run.ok);
  CHECK(ud_run.received == 40 * 6);
}

TEST_CASE("loopback: a list needing more receives than b's queue holds is refused, naming max_recv_wr") {
  bench::loopback<B, rc, signal_every<4>> lp(device<B>("mock0"), 64, {.caps = {16, 4}});
  auto l = decltype(lp.a.qp)::make_batch<6>();
  for (std::uint64_t i = 0; i < 6; ++i) REQUIRE(l.add(op::send<>{lp.a.msg}, i));
  const post_result r = lp.post(l);
  CHECK(r.status == post_status::rq_full);
  CHECK(lp.failures == 1);
  CHECK(lp.timeouts == 0);
  CHECK(lp.sent == 0);
  CHECK(l.size() == 6);  // nothing posted
  // A list of WRITEs needs none, and a list longer than the send queue is the device's refusal.
  auto writes = decltype(lp.a.qp)::make_batch<20>();
  for (std::uint64_t i = 0; i < 6; ++i) REQUIRE(writes.add(op::write{lp.a.msg, lp.b.remote}, i));
  CHECK(lp.post(writes).ok());
  for (std::uint64_t i = 0; i < 20; ++i) REQUIRE(writes.add(op::write{lp.a.msg, lp.b.remote}, i));
  CHECK(lp.post(writes).status == post_status::list_too_long);
  CHECK(lp.failures == 2);
}
