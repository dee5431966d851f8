// The public API's exception boundary: every public entry point runs its body through
// guardApi(), and every call into user code (token callbacks, step observers) through
// callUserCode(), so that no exception crosses runtime/include/llmc in either direction.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "llmc/status.h"

namespace llmc {

// Runs `body` (returning Status). std::bad_alloc becomes kResourceExhausted and any other
// exception kInternal, both naming `operation` (e.g. "Generator::generate"). Building the
// message allocates a little; after a failed large allocation that normally succeeds.
template <typename Body>
Status guardApi(const char* operation, Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc&) {
    return resourceExhausted(std::string(operation) + ": out of memory");
  } catch (const std::exception& e) {
    return internalError(std::string(operation) + ": unexpected exception: " + e.what());
  } catch (...) {
    return internalError(std::string(operation) + ": unexpected exception");
  }
}

// Calls user code (`call` returns void) and reports anything it throws as kCancelled: the
// caller's own code stopped the operation. `what` names it ("the token callback").
template <typename Call>
Status callUserCode(const char* what, Call&& call) {
  try {
    std::forward<Call>(call)();
    return okStatus();
  } catch (const std::exception& e) {
    return cancelled(std::string(what) + " threw: " + e.what());
  } catch (...) {
    return cancelled(std::string(what) + " threw an exception that is not a std::exception");
  }
}

}  // namespace llmc
