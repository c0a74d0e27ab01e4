# lit configuration for xcc's FileCheck tests.
import os

import lit.formats

config.name = "xcc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.xcc_obj_root, "tests", "lit")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Inputs"]

path = os.pathsep.join(config.xcc_tools_dirs + [config.llvm_tools_dir,
                                                 config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path
config.substitutions.append(("%fixtures", os.path.join(config.xcc_src_root, "tests", "fixtures")))
