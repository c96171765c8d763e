// transform.py must refuse this file: the emulator has no vote.sync in inline PTX (CMakeLists checks the message).
__device__ unsigned ballot(bool p) {
  unsigned r;
  asm volatile("vote.sync.ballot.b32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(unsigned(p)));
  return r;
}
