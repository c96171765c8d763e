// The fixtures' folder (HPDT_GOLDEN_DIR, an absolute path) in a source of its own: test_golden.cpp then compiles to
// the same object in every checkout, which ccache reuses.
namespace hpdt::test {

const char* golden_dir() { return HPDT_GOLDEN_DIR; }

}  // namespace hpdt::test
