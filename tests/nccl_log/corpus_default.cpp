// The configured default corpus folder (HPDT_NCCL_LOG_CORPUS_DEFAULT, an absolute path) in a source of its own: the
// other sources of test_nccl_log then compile to the same objects in every checkout, which ccache reuses.
namespace hpdt::nccl_log::test {

const char* corpus_default_dir() { return HPDT_NCCL_LOG_CORPUS_DEFAULT; }

}  // namespace hpdt::nccl_log::test
