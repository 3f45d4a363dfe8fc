// The number of threads of the calling process, for tests that bound how many threads a
// component starts (thread pools, task runners, stream reactors).
#ifndef SLUICE_TESTS_CORE_THREAD_COUNT_H_
#define SLUICE_TESTS_CORE_THREAD_COUNT_H_

#include <dirent.h>

namespace sluice {

// The entries of /proc/self/task; -1 where it cannot be read (not Linux).
inline int ThreadCount() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_THREAD_COUNT_H_
