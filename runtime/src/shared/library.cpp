// libllmc.so is the static runtime's objects linked whole (runtime/CMakeLists.txt); CMake
// needs a source of its own for a library target, and this is it.
namespace llmc {}
