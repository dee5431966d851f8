// The compile options shared by `llmc compile` and `llmc verify` (compiler builds only).
#pragma once

#include <string>
#include <vector>

#include "pipeline/Pipeline.h"

namespace llmc::cli {

// Parses the compile flag at args[i] (advancing i past its value) into `options`. Returns
// kExitOk when consumed, -1 when args[i] is not a compile flag, or a usage error's exit code.
// `report` (null: --report is not accepted) is set by --report.
int parseCompileFlag(const std::string& command, const std::vector<std::string>& args, size_t& i,
                     CompileOptions& options, bool* report);

}  // namespace llmc::cli
