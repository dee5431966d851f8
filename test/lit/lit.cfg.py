# lit configuration for llmc's FileCheck tests (dialects and passes).
import os

import lit.formats

config.name = "llmc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.llmc_binary_dir, "test", "lit")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in"]
config.environment["PATH"] = os.pathsep.join(
    [config.llmc_opt_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
