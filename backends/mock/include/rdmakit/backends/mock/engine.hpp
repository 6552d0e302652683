#pragma once
// The mock HCA's engine, one responsibility per header: rules.hpp (small rules and
// checks of data), completions.hpp (events, CQEs, ERR), wire.hpp (delivery and
// faults), responder.hpp, requester.hpp, windows.hpp (memory windows), clock.hpp (simulated time), checks.hpp (verb
// arguments), fabric_impl.hpp (the fabric's definitions).
#include <rdmakit/detail/definitions_guard.hpp>  // (separate compilation: src.hpp only)
#include <rdmakit/backends/mock/checks.hpp>
#include <rdmakit/backends/mock/clock.hpp>
#include <rdmakit/backends/mock/completions.hpp>
#include <rdmakit/backends/mock/fabric_impl.hpp>
#include <rdmakit/backends/mock/requester.hpp>
#include <rdmakit/backends/mock/responder.hpp>
#include <rdmakit/backends/mock/rules.hpp>
#include <rdmakit/backends/mock/transitions.hpp>
#include <rdmakit/backends/mock/wire.hpp>
#include <rdmakit/backends/mock/windows.hpp>
