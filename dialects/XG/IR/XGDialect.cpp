#include "dialects/XG/IR/XGDialect.h"

#include "dialects/XG/IR/XGOps.h"

#include "dialects/XG/IR/XGDialect.cpp.inc"

namespace xcc::xg {

void XGDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/XG/IR/XGOps.cpp.inc"
      >();
}

}  // namespace xcc::xg
