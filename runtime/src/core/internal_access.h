// The parts of the public classes that are llmc's own: an Engine's verified Plan and the
// Session run of one language-model step over the KV cache. InternalAccess is a friend of
// Engine and Session; only code that can include runtime/src (the runtime, tools, tests) sees it.
#pragma once

#include <vector>

#include "llmc/engine.h"
#include "llmc/session.h"
#include "llmc/status.h"

namespace llmc {

struct Plan;
struct LlmStepContext;
struct BackendInfo;

class InternalAccess {
 public:
  // The verified execution plan (core/plan.h), as immutable as the engine.
  static const Plan& plan(const Engine& engine) { return *engine.plan_; }
  // Session::run for one ragged step of a language model (`step` null: the plain run).
  static Status runStep(Session& session, const std::vector<NamedTensor>& inputs,
                        std::vector<NamedTensor>* outputs, LlmStepContext* step) {
    return session.runStep(inputs, outputs, step);
  }
  // The backend the session runs on, with its capabilities (core/backend.h).
  static const BackendInfo& backend(const Session& session);
};

}  // namespace llmc
