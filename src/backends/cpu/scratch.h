// Per-forward scratch buffers that only grow: a forward of fewer rows than the last one reuses the
// buffer as it is, so the rows after a decode step's one row are not zeroed again by the next prefill.
#pragma once
#include <cstddef>
#include <vector>

namespace tf::cpu {

// Makes v hold at least n elements; its first n are whatever the last forward left there.
template <class T>
void grow_to(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace tf::cpu
