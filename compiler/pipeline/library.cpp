// libllmc_compiler.so's own translation unit: the library is the compiler's objects, linked
// whole, behind llmc_compiler.map (what it exports is llmc/compiler.h's API).
#include "llmc/compiler.h"
