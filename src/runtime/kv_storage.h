// Where the KV cache's keys and values live: owned by the model's backend, addressed by slot.
// KvCache keeps the slot arithmetic (blocks, lanes); a backend's storage keeps the numbers in its
// own memory and type, so the engine never knows which device it runs on.
#pragma once
#include <cstdint>

namespace tf {

class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual int64_t n_slots() const = 0;
  // Copies one slot's keys and values in every layer (a verified draft row moving from scratch
  // to its lane's position); the bits move unchanged.
  virtual void copy_slot(int32_t from, int32_t to) = 0;
};

}  // namespace tf
